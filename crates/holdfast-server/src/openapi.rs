//! `/openapi.json`, generated from the handlers' `#[utoipa::path]`
//! attributes and the wire types' derives, so it cannot drift from the code.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::{api, console, error, routes};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "holdfast",
        description = "Oversell protection for e-commerce checkout: hold stock while a buyer pays, commit it when \
                       payment succeeds, give it back when it fails or the hold expires. Errors are \
                       `{\"error\": <stable code>, \"message\": …}`."
    ),
    paths(
        routes::reservations::create,
        routes::reservations::get,
        routes::reservations::claim,
        routes::reservations::release,
        routes::reservations::extend,
        routes::stock::set,
        routes::stock::adjust,
        routes::stock::fulfil,
        routes::stock::levels,
        routes::webhooks::create,
        routes::webhooks::list,
        routes::webhooks::remove,
        routes::admin::audit,
        routes::admin::connections,
        routes::admin::modes,
        routes::admin::set_mode,
        routes::admin::kill_switch,
        routes::admin::set_kill_switch,
        console::overview,
        routes::health::healthz,
        routes::health::readyz,
    ),
    components(schemas(error::ErrorBody, error::ShortfallBody, api::AllocationBody, api::LevelBody, routes::admin::ConnectionsBody, holdfast_core::ConnHold, routes::admin::KillSwitchBody, routes::webhooks::CreateWebhook, routes::webhooks::WebhookBody, routes::webhooks::CreatedWebhook, routes::webhooks::WebhookList, console::OverviewBody, console::RatePoint, console::HoldPoint, console::ShopMode, console::MigrationPanel, console::DeliveriesPanel, console::PodPanel, holdfast_sql::HotItem)),
    modifiers(&Bearer)
)]
#[derive(Debug)]
pub struct ApiDoc;

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("hf_<id>_<secret>").build(),
            ),
        );
    }
}

pub async fn serve() -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(ApiDoc::openapi())
}
