//! holdfast-server's integration tests: the real application started in
//! process on port 0, over real HTTP, each test on a fresh database of its
//! own, on every backend (PostgreSQL, MySQL/MariaDB, SQLite).

use holdfast_testkit as support;

mod app;
mod auth;
mod conntag;
mod console;
mod contract;
mod dashboards;
mod fuzz;
mod lifecycle;
mod load;
mod modes;
mod shutdown;
mod webhooks;

/// One test per backend for each listed test function.
macro_rules! per_backend {
    ($backend:ident: $($module:ident :: $name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                crate::$module::$name(holdfast_core::Backend::$backend).await
            }
        )*
    };
}

macro_rules! suite {
    ($backend:ident) => {
        per_backend!($backend:
            lifecycle::reserve_claim_release_extend_expire_over_http,
            lifecycle::probes_metrics_and_openapi,
            lifecycle::the_sweeper_applies_retention,
            load::two_hundred_http_buyers_for_one_hundred_units,
            auth::another_shops_reservation_answers_404,
            auth::missing_wrong_and_revoked_tokens_are_refused,
            fuzz::generated_bodies_never_5xx_and_4xx_change_nothing,
            shutdown::graceful_shutdown_finishes_the_request_in_flight,
            conntag::a_callers_tag_shows_in_the_connection_report,
            conntag::hostile_conn_tags_are_refused_and_change_nothing,
            console::the_console_is_built_in_and_its_overview_is_admin_only,
            modes::sql_primary_shop_keeps_reserving_across_the_kill_switch,
            modes::mode_routes_answer_404_without_redis,
            webhooks::each_topic_fires_once_per_change_and_only_when_subscribed,
            webhooks::inventory_events_follow_availability,
            webhooks::inventory_events_follow_availability_uncoalesced,
            webhooks::failures_are_retried_with_the_same_id_and_410_disables,
            webhooks::a_worker_killed_mid_batch_loses_nothing,
            webhooks::four_workers_share_the_queue,
            webhooks::subscriptions_over_http_and_serves_own_workers,
        );
    };
}

mod postgres {
    suite!(Postgres);
    per_backend!(Postgres:
        conntag::every_statement_is_tagged_with_shops_in_shadow_and_sql_primary,
        webhooks::ten_thousand_deliveries_by_four_workers,
    );

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_log_shows_http_caller_tags_and_no_hostile_request() {
        crate::conntag::postgres_log_shows_http_caller_tags_and_no_hostile_request().await
    }
}

mod mysql {
    suite!(MySql);
    per_backend!(MySql: conntag::every_statement_is_tagged_with_shops_in_shadow_and_sql_primary);
}

mod sqlite {
    suite!(Sqlite);
    // Body parsing and framing, the same on every backend.
    per_backend!(Sqlite: contract::answers_are_as_documented);
}

/// deploy/: the alerting rules under promtool, and every metric the
/// dashboard and the rules name exported by a running holdfast.
mod deploy {
    #[test]
    fn the_rules_pass_promtool() {
        crate::dashboards::the_rules_pass_promtool()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn every_metric_the_dashboard_and_rules_name_is_exported() {
        crate::dashboards::every_metric_the_dashboard_and_rules_name_is_exported().await
    }
}
