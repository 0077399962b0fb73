//! holdfast-sql's integration tests: one binary (one link step), on real
//! servers — the shared conformance suite against each dialect, with request
//! coalescing on and off, the
//! connection tags as the servers log them, and MySQL/MariaDB's row locks.

mod audit;
mod batches;
mod conn_tags;
mod hot_items;
mod level_reads;
mod margin;
mod mysql_locks;
mod refill_ahead;
mod retention;
mod unswept;

/// The conformance suite on each dialect, for a [`holdfast_testkit::Subject`]
/// constructor.
macro_rules! on_every_dialect {
    ($subject:ident) => {
        mod postgres {
            holdfast_testkit::conformance_suite!(holdfast_testkit::Subject::$subject(holdfast_core::Backend::Postgres));
        }
        mod mysql {
            holdfast_testkit::conformance_suite!(holdfast_testkit::Subject::$subject(holdfast_core::Backend::MySql));
        }
        mod sqlite {
            holdfast_testkit::conformance_suite!(holdfast_testkit::Subject::$subject(holdfast_core::Backend::Sqlite));
        }
    };
}

on_every_dialect!(Sql);

/// The same suite with coalescing off: every request alone.
mod alone {
    on_every_dialect!(SqlAlone);
}

/// The same suite on PostgreSQL through PgBouncer in transaction mode
/// (`?pooler=transaction`): no statement kept prepared, no startup option.
mod pgbouncer {
    holdfast_testkit::conformance_suite!(holdfast_testkit::Subject::SqlPooled);
}

/// The same suite with every connection over TLS, verified against the test
/// CA (`sslmode=verify-full`, `ssl-mode=VERIFY_IDENTITY`), as a user the
/// servers let in over TLS only.
mod tls {
    mod postgres {
        holdfast_testkit::conformance_suite!(holdfast_testkit::Subject::SqlTls(holdfast_core::Backend::Postgres));
    }
    mod mysql {
        holdfast_testkit::conformance_suite!(holdfast_testkit::Subject::SqlTls(holdfast_core::Backend::MySql));
    }
}
