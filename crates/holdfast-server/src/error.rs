//! The one error type every handler returns, and the JSON envelope every
//! error answer has: `{"error": <stable code>, "message": …}` (plus `lines`
//! for `insufficient_stock`). Store errors keep the code and status that
//! `holdfast_core::Error` gives them; the codes added here are the HTTP
//! layer's own (auth, routing, body framing, timeouts).

use axum::extract::rejection::{JsonRejection, QueryRejection, RawPathParamsRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use holdfast_core::{Error, Invalid, ItemId, Quantity, Shortfall};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

/// Every error code and its status: the README's table, as data. The
/// OpenAPI document names, for each error answer of each route, the codes
/// it can carry, from this table.
pub const CODES: &[(u16, &str)] = &[
    (400, "malformed_json"),
    (400, "bad_request"),
    (400, "invalid_conn_tag"),
    (401, "unauthorized"),
    (403, "forbidden"),
    (404, "not_found"),
    (405, "method_not_allowed"),
    (409, "insufficient_stock"),
    (409, "idempotency_conflict"),
    (409, "reservation_expired"),
    (409, "invalid_state"),
    (409, "stock_conflict"),
    (413, "payload_too_large"),
    (415, "unsupported_media_type"),
    (422, "invalid_request"),
    (500, "internal"),
    (503, "unavailable"),
    (503, "contended"),
    (503, "timeout"),
];

/// The codes an answer with this status can carry.
pub fn codes_of(status: u16) -> impl Iterator<Item = &'static str> {
    CODES.iter().filter(move |(s, _)| *s == status).map(|(_, c)| *c)
}

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable code, part of the API contract (see the README's table).
    #[schema(schema_with = error_code)]
    pub error: &'static str,
    /// For people; may change between versions.
    pub message: String,
    /// Only for `insufficient_stock`: what each line asked for and could have had.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<ShortfallBody>>)]
    pub lines: Option<Vec<Shortfall>>,
}

fn error_code() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(CODES.iter().map(|(_, c)| *c)))
        .description(Some("Stable code, part of the API contract (see the README's table)."))
        .build()
}

/// One line of an `insufficient_stock` answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShortfallBody {
    #[schema(value_type = ItemId)]
    pub item: String,
    #[schema(value_type = Quantity)]
    pub requested: u32,
    /// What the line could have had at that moment (less than `requested`
    /// for at least one line).
    pub available: u32,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// Seconds for `Retry-After` (503 answers).
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let retry_after = (status == StatusCode::SERVICE_UNAVAILABLE).then_some(1);
        Self { status, body: ErrorBody { error: code, message: message.into(), lines: None }, retry_after }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn timeout() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            "the request took longer than the server's request timeout",
        )
    }

    /// The answer for a status a layer below the handlers produced with no
    /// JSON body of its own (body limit, method router, panics).
    pub fn for_status(status: StatusCode) -> Self {
        let (code, message) = match status.as_u16() {
            400 => ("bad_request", "the request could not be read"),
            404 => ("not_found", "no such route"),
            405 => ("method_not_allowed", "this route does not take that method"),
            408 => ("timeout", "the request body came too slowly"),
            413 => ("payload_too_large", "the request body is over the size limit"),
            415 => ("unsupported_media_type", "send the body as application/json"),
            s if s >= 500 => ("internal", "internal error"),
            _ => ("bad_request", "the request was refused"),
        };
        Self::new(status, code, message)
    }

    pub fn code(&self) -> &'static str {
        self.body.error
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Internal and database details go to the log, not to the caller.
        let message = match &e {
            Error::Internal(detail) => {
                tracing::error!(%detail, "internal store error");
                "internal error".to_string()
            }
            Error::Unavailable(detail) => {
                metrics::counter!("holdfast_db_unavailable_total").increment(1);
                tracing::warn!(%detail, "database unavailable");
                "the database is unavailable or every connection is busy; try again".to_string()
            }
            e => e.to_string(),
        };
        let mut err = ApiError::new(status, e.code(), message);
        if let Error::InsufficientStock(lines) = e {
            err.body.lines = Some(lines);
        }
        err
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        Error::Invalid(e).into()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r {
            // Well-formed JSON of the wrong shape: missing fields, wrong
            // types, values our types refuse (quantity 0, a bad item id).
            JsonRejection::JsonDataError(e) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", e.body_text())
            }
            JsonRejection::JsonSyntaxError(e) => Self::new(StatusCode::BAD_REQUEST, "malformed_json", e.body_text()),
            JsonRejection::MissingJsonContentType(_) => Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body with Content-Type: application/json",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Self::for_status(StatusCode::PAYLOAD_TOO_LARGE)
            }
            other => Self::new(StatusCode::BAD_REQUEST, "bad_request", other.body_text()),
        }
    }
}

/// Path parameters that could not be read (not UTF-8 once percent-decoded).
impl From<RawPathParamsRejection> for ApiError {
    fn from(r: RawPathParamsRejection) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", r.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(&self.body)).into_response();
        if let Some(secs) = self.retry_after {
            res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        // Lets the envelope middleware tell our answers from a layer's.
        res.extensions_mut().insert(Enveloped);
        res
    }
}

/// Marks a response whose body is already an [`ErrorBody`].
#[derive(Debug, Clone, Copy)]
pub struct Enveloped;

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exhausted_pool_answers_503_with_retry_after() {
        let res = ApiError::from(Error::Unavailable("pool timed out".into())).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers().get(header::RETRY_AFTER).unwrap(), "1");
        let res = ApiError::from(Error::RetriesExhausted(8)).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(res.headers().contains_key(header::RETRY_AFTER));
    }

    #[test]
    fn every_code_is_in_the_table_with_its_status() {
        let errors = [
            Error::Invalid(Invalid::new("f", "m")),
            Error::InsufficientStock(vec![]),
            Error::IdempotencyConflict("k".into()),
            Error::NotFound,
            Error::Expired,
            Error::WrongStatus(holdfast_core::ReservationStatus::Claimed, "released"),
            Error::StockConflict("x".into()),
            Error::RetriesExhausted(8),
            Error::Unavailable("x".into()),
            Error::Internal("x".into()),
        ];
        let mut answers: Vec<ApiError> = errors.into_iter().map(ApiError::from).collect();
        for s in [400, 404, 405, 413, 415, 500] {
            answers.push(ApiError::for_status(StatusCode::from_u16(s).unwrap()));
        }
        answers.extend([ApiError::unauthorized("x"), ApiError::forbidden("x"), ApiError::timeout()]);
        for a in answers {
            assert!(codes_of(a.status.as_u16()).any(|c| c == a.code()), "{} {} is not in CODES", a.status, a.code());
        }
    }

    #[test]
    fn internal_details_stay_in_the_log() {
        let e = ApiError::from(Error::Internal("duplicate key value violates constraint x".into()));
        assert_eq!(
            (e.status, e.code(), e.body.message.as_str()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error")
        );
    }
}
