//! What differs between the three sqlx drivers below the SQL text: how a
//! value is bound and how a column is read. With these four column readers and
//! one binder per driver, every row is decoded by one function for all
//! dialects (`decode.rs`) and every plain statement is sent by one function
//! (`run.rs`).
//!
//! The differences they hide: MySQL hands `ascii_bin` columns (every
//! identifier) over as bytes; PostgreSQL's integers have the width the SQL
//! gives them (`int4` or `int8`); MySQL computes booleans as integers; SQLite
//! keeps times as unix milliseconds.

use std::future::Future;

use chrono::{DateTime, Utc};
use sqlx::{Column, Database, Row, TypeInfo, ValueRef};

/// A value bound to one placeholder.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    /// A text that may be NULL.
    MaybeText(Option<&'a str>),
    Int(i64),
    Flag(bool),
    Time(DateTime<Utc>),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(s: &'a str) -> Self {
        Arg::Text(s)
    }
}

impl From<i64> for Arg<'_> {
    fn from(n: i64) -> Self {
        Arg::Int(n)
    }
}

/// One sqlx driver: binds [`Arg`]s and reads columns by name.
pub(crate) trait Driver: Database + Sized {
    fn text(row: &Self::Row, col: &str) -> sqlx::Result<String>;
    fn int(row: &Self::Row, col: &str) -> sqlx::Result<i64>;
    fn flag(row: &Self::Row, col: &str) -> sqlx::Result<bool>;
    /// A time that may be NULL.
    fn maybe_time(row: &Self::Row, col: &str) -> sqlx::Result<Option<DateTime<Utc>>>;

    /// Whether the column is NULL.
    fn is_null(row: &Self::Row, col: &str) -> sqlx::Result<bool>;

    /// An integer that may be NULL.
    fn maybe_int(row: &Self::Row, col: &str) -> sqlx::Result<Option<i64>> {
        if Self::is_null(row, col)? { Ok(None) } else { Self::int(row, col).map(Some) }
    }

    /// A text that may be NULL.
    fn maybe_text(row: &Self::Row, col: &str) -> sqlx::Result<Option<String>> {
        if Self::is_null(row, col)? { Ok(None) } else { Self::text(row, col).map(Some) }
    }

    fn time(row: &Self::Row, col: &str) -> sqlx::Result<DateTime<Utc>> {
        Self::maybe_time(row, col)?.ok_or_else(|| sqlx::Error::Decode(format!("{col} is NULL").into()))
    }

    /// Sends `sql` with `args` and returns every row.
    fn fetch<'a>(
        c: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'a {
        Self::fetch_as(c, sql, args, true)
    }

    /// Sends `sql` with `args` and returns the rows it changed.
    fn execute<'a>(
        c: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
    ) -> impl Future<Output = sqlx::Result<u64>> + Send + 'a {
        Self::execute_as(c, sql, args, true)
    }

    /// [`fetch`](Self::fetch), the statement kept prepared on the connection
    /// (`persistent`) or sent unnamed (behind a pooler in transaction mode).
    fn fetch_as<'a>(
        c: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
        persistent: bool,
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'a;

    /// [`execute`](Self::execute), kept prepared or not as in [`fetch_as`](Self::fetch_as).
    fn execute_as<'a>(
        c: &'a mut Self::Connection,
        sql: &'a str,
        args: &'a [Arg<'a>],
        persistent: bool,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send + 'a;

    /// Sends a text of several statements and no parameters (a migration).
    fn script<'a>(c: &'a mut Self::Connection, sql: &'a str) -> impl Future<Output = sqlx::Result<()>> + Send + 'a;
}

/// The `fetch` and `execute` of one driver; `$time` turns a bound time into
/// what its columns hold.
macro_rules! send {
    ($db:ty, |$t:ident| $time:expr) => {
        fn fetch_as<'a>(
            c: &'a mut Self::Connection,
            sql: &'a str,
            args: &'a [Arg<'a>],
            persistent: bool,
        ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send + 'a {
            bind!($db, sql, args, |$t| $time).persistent(persistent).fetch_all(c)
        }

        async fn execute_as<'a>(
            c: &'a mut Self::Connection,
            sql: &'a str,
            args: &'a [Arg<'a>],
            persistent: bool,
        ) -> sqlx::Result<u64> {
            Ok(bind!($db, sql, args, |$t| $time).persistent(persistent).execute(c).await?.rows_affected())
        }

        fn script<'a>(c: &'a mut Self::Connection, sql: &'a str) -> impl Future<Output = sqlx::Result<()>> + Send + 'a {
            // A plain text with no arguments goes over the simple (text)
            // protocol, which carries several statements at once.
            let done = sqlx::Executor::execute(c, sql);
            async move { done.await.map(|_| ()) }
        }
    };
}

macro_rules! bind {
    ($db:ty, $sql:expr, $args:expr, |$t:ident| $time:expr) => {{
        let mut q = sqlx::query::<$db>($sql);
        for a in $args {
            q = match *a {
                Arg::Text(s) => q.bind(s),
                Arg::MaybeText(s) => q.bind(s),
                Arg::Int(n) => q.bind(n),
                Arg::Flag(b) => q.bind(b),
                Arg::Time($t) => q.bind($time),
            };
        }
        q
    }};
}

impl Driver for sqlx::Postgres {
    fn text(row: &Self::Row, col: &str) -> sqlx::Result<String> {
        row.try_get(col)
    }

    /// `count(*)` and `sum()` are `int8`, quantities `int4`: read the width
    /// the column has.
    fn int(row: &Self::Row, col: &str) -> sqlx::Result<i64> {
        match row.try_column(col)?.type_info().name() {
            "INT4" => Ok(row.try_get::<i32, _>(col)?.into()),
            "INT2" => Ok(row.try_get::<i16, _>(col)?.into()),
            _ => row.try_get(col),
        }
    }

    fn flag(row: &Self::Row, col: &str) -> sqlx::Result<bool> {
        row.try_get(col)
    }

    fn maybe_time(row: &Self::Row, col: &str) -> sqlx::Result<Option<DateTime<Utc>>> {
        row.try_get(col)
    }

    fn is_null(row: &Self::Row, col: &str) -> sqlx::Result<bool> {
        Ok(row.try_get_raw(col)?.is_null())
    }

    send!(sqlx::Postgres, |t| t);
}

impl Driver for sqlx::MySql {
    /// Columns with a binary collation (`ascii_bin`) carry the BINARY flag,
    /// so the driver hands them over as bytes.
    fn text(row: &Self::Row, col: &str) -> sqlx::Result<String> {
        match row.try_get::<String, _>(col) {
            Ok(s) => Ok(s),
            Err(_) => String::from_utf8(row.try_get(col)?).map_err(|e| sqlx::Error::Decode(Box::new(e))),
        }
    }

    fn int(row: &Self::Row, col: &str) -> sqlx::Result<i64> {
        row.try_get(col)
    }

    /// A comparison is an integer here; BOOLEAN columns are TINYINT(1).
    fn flag(row: &Self::Row, col: &str) -> sqlx::Result<bool> {
        Ok(Self::int(row, col)? != 0)
    }

    fn maybe_time(row: &Self::Row, col: &str) -> sqlx::Result<Option<DateTime<Utc>>> {
        row.try_get(col)
    }

    fn is_null(row: &Self::Row, col: &str) -> sqlx::Result<bool> {
        Ok(row.try_get_raw(col)?.is_null())
    }

    send!(sqlx::MySql, |t| t);
}

impl Driver for sqlx::Sqlite {
    fn text(row: &Self::Row, col: &str) -> sqlx::Result<String> {
        row.try_get(col)
    }

    fn int(row: &Self::Row, col: &str) -> sqlx::Result<i64> {
        row.try_get(col)
    }

    fn flag(row: &Self::Row, col: &str) -> sqlx::Result<bool> {
        row.try_get(col)
    }

    /// Times are integer unix milliseconds, UTC.
    fn maybe_time(row: &Self::Row, col: &str) -> sqlx::Result<Option<DateTime<Utc>>> {
        let Some(ms) = row.try_get::<Option<i64>, _>(col)? else {
            return Ok(None);
        };
        DateTime::from_timestamp_millis(ms)
            .map(Some)
            .ok_or_else(|| sqlx::Error::Decode(format!("{col} out of range: {ms} ms").into()))
    }

    fn is_null(row: &Self::Row, col: &str) -> sqlx::Result<bool> {
        Ok(row.try_get_raw(col)?.is_null())
    }

    send!(sqlx::Sqlite, |t| t.timestamp_millis());
}
