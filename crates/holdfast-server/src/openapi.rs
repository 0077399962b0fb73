//! `/openapi.json`, generated from the handlers' `#[utoipa::path]`
//! attributes and the wire types' derives, so it cannot drift from the code.
//!
//! The document is exact: every route lists every status it can answer.
//! Each handler declares what is its own — its success answers and the
//! errors only it gives (a `409`, a missing reservation's `404`), naming the
//! codes of each in backticks. [`Contract`] adds, from one table, the answers
//! that follow from how a route is reached: `401` for a secured route, `403`
//! for an admin route, `404` for a shop the token does not reach, `400` for a
//! body that is not JSON or a bad `X-Conn-Tag`, `405`, `413` and `415` for
//! bodies, `422` for any input, `500`, and `503` with `Retry-After`. Every
//! error answer's `error` is narrowed to the codes it can carry
//! ([`crate::error::CODES`], the README's table).

use std::collections::BTreeMap;

use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::{HttpMethod, Operation, OperationBuilder, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{AdditionalProperties, AllOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Ref, RefOr, Required};
use utoipa::{Modify, OpenApi};

use crate::error::codes_of;
use crate::{api, console, error, routes};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "holdfast",
        description = "Oversell protection for e-commerce checkout: hold stock while a buyer pays, commit it when \
                       payment succeeds, give it back when it fails or the hold expires. Errors are \
                       `{\"error\": <stable code>, \"message\": …}`; every answer lists the codes it can carry."
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
    components(schemas(
        error::ErrorBody,
        error::ShortfallBody,
        api::AllocationBody,
        api::LevelBody,
        routes::admin::ConnectionsBody,
        holdfast_core::ConnHold,
        routes::admin::KillSwitchBody,
        routes::webhooks::CreateWebhook,
        routes::webhooks::WebhookBody,
        routes::webhooks::CreatedWebhook,
        routes::webhooks::WebhookList,
        routes::webhooks::WebhookId,
        holdfast_core::ShopId,
        holdfast_core::ItemId,
        holdfast_core::LocationId,
        holdfast_core::IdempotencyKey,
        holdfast_core::ReservationId,
        holdfast_core::ConnTag,
        holdfast_core::Quantity,
        holdfast_core::Topic,
        holdfast_core::ReservationStatus,
        holdfast_core::Mode,
        console::OverviewBody,
        console::RatePoint,
        console::HoldPoint,
        console::ShopMode,
        console::MigrationPanel,
        console::DeliveriesPanel,
        console::PodPanel,
        holdfast_sql::HotItem,
    )),
    modifiers(&Bearer, &Contract)
)]
#[derive(Debug)]
pub struct ApiDoc;

/// The bearer scheme, and the routes that need it: every `/v1` route takes
/// a [`crate::auth::ShopAccess`] and every `/admin` route an
/// [`crate::auth::Admin`], so the handlers do not declare it one by one.
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
        for (path, op) in operations(doc) {
            if path.starts_with("/v1/") || path.starts_with("/admin/") {
                op.security = Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new())]);
            }
        }
    }
}

/// Every operation of the document, with its path.
fn operations(doc: &mut utoipa::openapi::OpenApi) -> impl Iterator<Item = (&str, &mut Operation)> {
    doc.paths.paths.iter_mut().flat_map(|(path, item)| {
        let ops = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        ops.into_iter().flatten().map(move |op| (path.as_str(), op))
    })
}

/// The answers every route gets from how it is reached (see the module's
/// documentation), the routes without a handler attribute (`/metrics`,
/// `/openapi.json`), the `X-Conn-Tag` header of `/v1`, and the links from
/// what a create answers to the routes that take its id.
struct Contract;

impl Modify for Contract {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let metrics = ("Prometheus metrics (text exposition format).", "the metrics", "text/plain; version=0.0.4");
        doc.paths.paths.insert("/metrics".into(), plain_route("metrics", metrics, Type::String));
        let document = ("This document.", "the OpenAPI document", "application/json");
        doc.paths.paths.insert("/openapi.json".into(), plain_route("openapi", document, Type::Object));
        // utoipa 5 does not carry `deny_unknown_fields` into an enum's
        // variants; these enums refuse unknown fields in each.
        if let Some(components) = doc.components.as_mut() {
            for name in ["ModeChange"] {
                let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(name) else {
                    panic!("{name} is not a oneOf");
                };
                for branch in one_of.items.iter_mut() {
                    if let RefOr::T(Schema::Object(o)) = branch {
                        o.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
                    }
                }
            }
        }
        let schemas = doc.components.as_ref().map(|c| c.schemas.clone()).unwrap_or_default();
        for (path, op) in operations(doc) {
            contract(path, op);
            inline_parameters(op, &schemas);
        }
        links(doc);
    }
}

/// One error answer a route can give: its status, why, and its codes.
struct Answer {
    status: u16,
    why: String,
    codes: Vec<&'static str>,
}

impl Answer {
    fn new(status: u16, why: &str, codes: &[&'static str]) -> Self {
        Self { status, why: why.to_string(), codes: codes.to_vec() }
    }
}

/// The answers that follow from how `path` is reached, for `op`.
fn reached(path: &str, op: &Operation) -> Vec<Answer> {
    let v1 = path.starts_with("/v1/");
    let shop = path.starts_with("/v1/shops/{shop}");
    let admin = path.starts_with("/admin/");
    let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
    let body = op.request_body.is_some();
    let inputs =
        body || op.parameters.as_ref().is_some_and(|p| p.iter().any(|p| p.parameter_in != ParameterIn::Header));
    let mut answers = Vec::new();
    if body || v1 {
        let mut codes = Vec::new();
        let mut why = Vec::new();
        if v1 {
            codes.push("invalid_conn_tag");
            why.push("`invalid_conn_tag`: `X-Conn-Tag` is not `[a-z0-9_]{1,64}` (checked first: nothing reached the database)");
        }
        if body {
            codes.extend(["malformed_json", "bad_request"]);
            why.push("`malformed_json`: the body is not JSON; `bad_request`: the body could not be read");
        }
        answers.push(Answer { status: 400, why: why.join("; "), codes });
    }
    // The answers of one code each, when they apply; the code is the one
    // the description names, as in a handler's own answers.
    let single: [(bool, u16, &str); 8] = [
        (secured, 401, "`unauthorized`: the token is missing, unknown or revoked"),
        (secured && admin, 403, "`forbidden`: the token is not an admin token"),
        (shop, 404, "`not_found`: a shop this token does not reach, answered as if it did not exist"),
        (true, 405, "`method_not_allowed`: the path does not take the method sent; `Allow` lists those it takes"),
        (body, 413, "`payload_too_large`: the body is over `body_limit_bytes`"),
        (body, 415, "`unsupported_media_type`: the body is not sent as `application/json`"),
        (
            inputs,
            422,
            "`invalid_request`: a parameter or body field is missing, of the wrong type, out of range or unknown",
        ),
        (true, 500, "`internal`: a bug; the details are in the server's log, not here"),
    ];
    for (applies, status, why) in single {
        if applies {
            answers.push(Answer { status, why: why.to_string(), codes: declared_codes(status, why) });
        }
    }
    // Every secured route looks its token up; those that use the store may
    // also run out of retries.
    let store = v1 || body || path == "/admin/audit";
    if path == "/readyz" {
        answers.push(Answer::new(503, "`timeout`: the request took over the request timeout", &["timeout"]));
    } else if secured {
        let mut answer = Answer::new(
            503,
            "`unavailable`: no database connection came in time; `timeout`: the request took over the request \
             timeout (a change it made may still commit: a reservation's idempotency key makes it safe to send \
             again)",
            &["unavailable", "timeout"],
        );
        if store {
            answer.codes.insert(1, "contended");
            answer.why.push_str("; `contended`: the database stayed contended through every retry");
        }
        answers.push(answer);
    }
    answers
}

fn contract(path: &str, op: &mut Operation) {
    if path.starts_with("/v1/") {
        op.parameters.get_or_insert_with(Vec::new).push(
            ParameterBuilder::new()
                .name("X-Conn-Tag")
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "The business process this request is for; every SQL statement sent for it names it \
                     (`/* conn_tag:<tag> */`), and `/admin/connections` counts connection use per tag",
                ))
                .schema(Some(Ref::from_schema_name("ConnTag")))
                .build(),
        );
    }
    let mut done = Vec::new();
    for answer in reached(path, op) {
        let key = answer.status.to_string();
        done.push(key.clone());
        let merged = match op.responses.responses.get(&key) {
            Some(RefOr::T(own)) => {
                let mut codes = declared_codes(answer.status, &own.description);
                for c in answer.codes {
                    if !codes.contains(&c) {
                        codes.push(c);
                    }
                }
                Answer { status: answer.status, why: format!("{}; {}", own.description, answer.why), codes }
            }
            _ => answer,
        };
        op.responses.responses.insert(key, RefOr::T(error_response(&merged)));
    }
    // The handler's own error answers, not merged above, get their codes too.
    for (key, response) in op.responses.responses.iter_mut() {
        let status: u16 = key.parse().expect("a numeric status");
        if let RefOr::T(own) = response
            && status >= 400
            && !done.contains(key)
        {
            let codes = declared_codes(status, &own.description);
            *own = error_response(&Answer { status, why: own.description.clone(), codes });
        }
    }
    for response in op.responses.responses.values_mut() {
        if let RefOr::T(r) = response {
            r.headers.insert(
                "X-Request-Id".into(),
                HeaderBuilder::new()
                    .schema(ObjectBuilder::new().schema_type(Type::String))
                    .description(Some("The request's id, as in the server's log"))
                    .build(),
            );
        }
    }
}

/// Parameters carry their schema itself, not a reference to the component
/// (`ShopId`, …) it is a copy of: what most client generators expect, and
/// what schemathesis 4 needs to check its dictionaries against them.
fn inline_parameters(op: &mut Operation, schemas: &BTreeMap<String, RefOr<Schema>>) {
    for p in op.parameters.iter_mut().flatten() {
        if let Some(RefOr::Ref(r)) = &p.schema {
            let name = r.ref_location.trim_start_matches("#/components/schemas/");
            let schema = schemas.get(name).unwrap_or_else(|| panic!("parameter {} names no schema {name}", p.name));
            p.schema = Some(schema.clone());
        }
    }
}

/// The codes a handler's description of an error answer names in
/// backticks; all of its status's codes when it names none. A code of
/// another status is a mistake in the handler's attribute.
fn declared_codes(status: u16, description: &str) -> Vec<&'static str> {
    let named: Vec<&str> = description.split('`').skip(1).step_by(2).collect();
    let known: Vec<&'static str> = codes_of(status).filter(|c| named.contains(c)).collect();
    for n in &named {
        if !known.contains(n) && error::CODES.iter().any(|(_, c)| c == n) {
            panic!("the {status} answer's description names `{n}`, a code of another status");
        }
    }
    if known.is_empty() { codes_of(status).collect() } else { known }
}

fn error_response(answer: &Answer) -> Response {
    let error = ObjectBuilder::new().schema_type(Type::String).enum_values(Some(answer.codes.iter().copied()));
    let schema = AllOfBuilder::new()
        .item(Ref::from_schema_name("ErrorBody"))
        .item(ObjectBuilder::new().schema_type(Type::Object).property("error", error).required("error"))
        .build();
    let mut response = ResponseBuilder::new()
        .description(answer.why.clone())
        .content("application/json", ContentBuilder::new().schema(Some(Schema::AllOf(schema))).build());
    let header = |schema: Type, why: &str| {
        HeaderBuilder::new().schema(ObjectBuilder::new().schema_type(schema)).description(Some(why)).build()
    };
    response = match answer.status {
        401 => response.header("WWW-Authenticate", header(Type::String, "`Bearer`")),
        405 => response.header("Allow", header(Type::String, "The methods the path takes")),
        503 => response.header("Retry-After", header(Type::Integer, "Seconds to wait before trying again")),
        _ => response,
    };
    response.build()
}

/// A route with no handler attribute: `GET`, with its summary and one `200`
/// answer (its description and content type) whose schema is a bare `schema`.
fn plain_route(id: &str, (summary, answer, content): (&str, &str, &str), schema: Type) -> PathItem {
    let schema = ObjectBuilder::new().schema_type(schema);
    let op = OperationBuilder::new()
        .tag("health")
        .operation_id(Some(id))
        .summary(Some(summary))
        .response(
            "200",
            ResponseBuilder::new()
                .description(answer)
                .content(content, ContentBuilder::new().schema(Some(schema)).build()),
        )
        .build();
    PathItem::new(HttpMethod::Get, op)
}

/// Links from an answer that names a new resource to the operations that
/// take its id: a client (or a test generator) follows them instead of
/// guessing ids.
fn links(doc: &mut utoipa::openapi::OpenApi) {
    let same_shop = ("shop", "$request.path.shop");
    let reservation = [same_shop, ("id", "$response.body#/id")];
    let item = [same_shop, ("item", "$request.path.item")];
    let place = [same_shop, ("item", "$request.path.item"), ("location", "$request.path.location")];
    // (path, method, answers, the target's parameters, the target operations)
    type Link<'a> = (&'a str, HttpMethod, &'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);
    let table: &[Link] = &[
        (
            "/v1/shops/{shop}/reservations",
            HttpMethod::Post,
            &["201", "200"],
            &reservation,
            &["get_reservation", "claim_reservation", "release_reservation", "extend_reservation"],
        ),
        (
            "/v1/shops/{shop}/webhooks",
            HttpMethod::Post,
            &["201"],
            &[same_shop, ("id", "$response.body#/id")],
            &["remove_webhook"],
        ),
        ("/v1/shops/{shop}/items/{item}/locations/{location}", HttpMethod::Put, &["200"], &item, &["item_levels"]),
        (
            "/v1/shops/{shop}/items/{item}/locations/{location}",
            HttpMethod::Put,
            &["200"],
            &place,
            &["adjust_stock", "fulfil_stock"],
        ),
    ];
    for (path, method, statuses, params, targets) in table {
        let item = doc.paths.paths.get_mut(*path).unwrap_or_else(|| panic!("no path {path}"));
        let op = match method {
            HttpMethod::Post => item.post.as_mut(),
            HttpMethod::Put => item.put.as_mut(),
            _ => None,
        }
        .unwrap_or_else(|| panic!("no operation for {path}"));
        for status in *statuses {
            let Some(RefOr::T(response)) = op.responses.responses.get_mut(*status) else {
                panic!("{path} has no {status} answer");
            };
            for target in *targets {
                let mut link = LinkBuilder::new().operation_id(*target);
                for (name, value) in *params {
                    link = link.parameter(*name, *value);
                }
                response.links.insert((*target).to_string(), RefOr::T(link.build()));
            }
        }
    }
}

/// The document as served. utoipa 5 writes a link's fields in snake case
/// (`operation_id`), which no OpenAPI reader knows; they are renamed here.
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serializes");
    let links = doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut())
        .filter_map(|op| op.get_mut("responses").and_then(|r| r.as_object_mut()))
        .flat_map(|responses| responses.values_mut())
        .filter_map(|response| response.get_mut("links").and_then(|l| l.as_object_mut()))
        .flat_map(|links| links.values_mut())
        .filter_map(|link| link.as_object_mut());
    for link in links {
        for (from, to) in
            [("operation_id", "operationId"), ("operation_ref", "operationRef"), ("request_body", "requestBody")]
        {
            if let Some(v) = link.remove(from) {
                link.insert(to.into(), v);
            }
        }
    }
    doc
}

pub async fn serve() -> axum::Json<serde_json::Value> {
    static DOC: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    axum::Json(DOC.get_or_init(document).clone())
}
