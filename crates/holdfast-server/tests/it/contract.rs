//! The OpenAPI document's structural promises, checked on the document
//! itself: every route lists the answers of how it is reached, path
//! parameters carry their rules, request bodies are as strict as the
//! service, and the error codes are the README's. Fast, and no substitute
//! for `scripts/contract`, which checks the document against a running
//! server with schemathesis.

use std::collections::BTreeSet;

use holdfast_core::{MAX_CANDIDATES, MAX_LINES, Quantity, ShopId, Ttl};
use holdfast_server::error::CODES;
use serde_json::Value;

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

fn document() -> Value {
    holdfast_server::openapi::document()
}

/// Every (path, method, operation) of the document.
fn operations(doc: &Value) -> Vec<(String, &'static str, Value)> {
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                all.push((path.clone(), method, op.clone()));
            }
        }
    }
    assert!(all.len() >= 20, "{} operations", all.len());
    all
}

/// Follows a `$ref` into the components, once.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => &doc["components"]["schemas"][r.trim_start_matches("#/components/schemas/")],
        None => schema,
    }
}

/// The codes an error answer says it can carry.
fn codes(response: &Value) -> Vec<String> {
    let schema = &response["content"]["application/json"]["schema"];
    let parts = schema["allOf"].as_array().unwrap_or_else(|| panic!("not an ErrorBody answer: {response}"));
    assert_eq!(parts[0]["$ref"], "#/components/schemas/ErrorBody", "{response}");
    parts[1]["properties"]["error"]["enum"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().into()).collect()
}

#[test]
fn every_operation_lists_the_answers_of_how_it_is_reached() {
    let doc = document();
    let mut ids = BTreeSet::new();
    for (path, method, op) in operations(&doc) {
        let at = format!("{method} {path}");
        let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{at}: no operationId"));
        assert!(ids.insert(id.to_string()), "{at}: operationId {id} used twice");
        let responses = op["responses"].as_object().unwrap();
        let has = |s: &str| responses.contains_key(s);
        let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
        let body = op.get("requestBody").is_some();
        let params: Vec<&Value> = op["parameters"].as_array().map(|p| p.iter().collect()).unwrap_or_default();
        let inputs = body || params.iter().any(|p| p["in"] != "header");
        let mut want = vec!["405", "500"];
        if secured {
            want.extend(["401", "503"]);
        }
        if path.starts_with("/admin/") {
            assert!(secured, "{at}: an admin route without security");
            want.push("403");
        }
        if path.starts_with("/v1/") {
            assert!(secured, "{at}: a /v1 route without security");
            want.extend(["400", "404"]);
            let tag = params.iter().find(|p| p["name"] == "X-Conn-Tag").unwrap_or_else(|| panic!("{at}: X-Conn-Tag"));
            assert_eq!(
                (tag["in"].as_str(), tag["schema"]["pattern"].as_str()),
                (Some("header"), Some("^[a-z0-9_]{1,64}$"))
            );
            assert!(codes(&responses["400"]).contains(&"invalid_conn_tag".to_string()), "{at}");
        }
        if body {
            want.extend(["400", "413", "415"]);
            assert!(op["requestBody"]["content"]["application/json"].is_object(), "{at}");
            let bad = codes(&responses["400"]);
            assert!(bad.contains(&"malformed_json".into()) && bad.contains(&"bad_request".into()), "{at}: {bad:?}");
        }
        if inputs {
            want.push("422");
        }
        if path == "/readyz" {
            want.push("503");
        }
        for status in want {
            assert!(has(status), "{at} does not list {status}");
        }
        for (status, response) in responses {
            assert!(response["headers"]["X-Request-Id"].is_object(), "{at} {status}: no X-Request-Id");
            let code: u16 = status.parse().unwrap();
            if code < 400 {
                continue;
            }
            let listed = codes(response);
            assert!(!listed.is_empty(), "{at} {status}");
            for c in &listed {
                assert!(CODES.contains(&(code, c.as_str())), "{at} {status}: `{c}` is not a code of {status}");
            }
            let header = match code {
                401 => Some("WWW-Authenticate"),
                405 => Some("Allow"),
                503 => Some("Retry-After"),
                _ => None,
            };
            if let Some(h) = header {
                assert!(response["headers"][h].is_object(), "{at} {status}: no {h}");
            }
        }
    }
}

#[test]
fn path_parameters_carry_their_rules() {
    let doc = document();
    let name = format!("^[A-Za-z0-9_.:-]{{1,{}}}$", ShopId::MAX_LEN);
    for (path, method, op) in operations(&doc) {
        let at = format!("{method} {path}");
        let params: Vec<Value> = op["parameters"].as_array().cloned().unwrap_or_default();
        let in_template: BTreeSet<&str> =
            path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect();
        let declared: BTreeSet<&str> =
            params.iter().filter(|p| p["in"] == "path").map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(in_template, declared, "{at}: path parameters");
        for p in params.iter().filter(|p| p["in"] == "path") {
            let schema = &p["schema"];
            assert!(schema.get("$ref").is_none(), "{at}: {} is a reference, not its schema", p["name"]);
            assert_eq!(p["required"], true, "{at}");
            match (p["name"].as_str().unwrap(), path.contains("/reservations/")) {
                ("shop" | "item" | "location", _) => {
                    assert_eq!(schema["pattern"].as_str(), Some(name.as_str()), "{at}: {}", p["name"]);
                    assert_eq!((schema["minLength"].as_u64(), schema["maxLength"].as_u64()), (Some(1), Some(64)));
                }
                ("id", true) => {
                    assert_eq!(
                        (schema["type"].as_str(), schema["minimum"].as_i64()),
                        (Some("integer"), Some(1)),
                        "{at}"
                    );
                    assert_eq!(schema["format"], "int64", "{at}");
                }
                ("id", false) => assert_eq!(schema["pattern"], "^wh_[a-z2-7]{16}$", "{at}"),
                (other, _) => panic!("{at}: path parameter {other} has no rule here"),
            }
        }
        for p in params.iter().filter(|p| p["in"] == "query") {
            assert!(p["schema"]["pattern"].is_string(), "{at}: query {} has no pattern", p["name"]);
            assert_eq!(p["required"], false, "{at}");
        }
    }
}

#[test]
fn request_bodies_are_as_strict_as_the_service() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    // Each refuses unknown fields (serde's deny_unknown_fields).
    for name in [
        "CreateReservation",
        "LineBody",
        "ExtendBody",
        "SetStock",
        "AdjustStock",
        "FulfilStock",
        "CreateWebhook",
        "KillSwitchBody",
    ] {
        assert_eq!(schemas[name]["additionalProperties"], false, "{name}");
    }
    for branch in schemas["ModeChange"]["oneOf"].as_array().unwrap() {
        assert_eq!(branch["additionalProperties"], false, "ModeChange: {branch}");
    }
    let create = &schemas["CreateReservation"]["properties"];
    assert_eq!(create["lines"]["maxItems"].as_u64(), Some(MAX_LINES as u64));
    assert_eq!(create["lines"]["minItems"].as_u64(), Some(1));
    assert_eq!(create["ttl_seconds"]["maximum"].as_u64(), Some(Ttl::MAX_SECS));
    assert_eq!(create["ttl_seconds"]["minimum"].as_u64(), Some(Ttl::MIN_SECS));
    assert_eq!(schemas["ExtendBody"]["properties"]["ttl_seconds"]["maximum"].as_u64(), Some(Ttl::MAX_SECS));
    let line = &schemas["LineBody"]["properties"];
    assert_eq!(resolve(&doc, &line["quantity"])["maximum"].as_u64(), Some(Quantity::MAX as u64));
    assert_eq!(line["locations"]["maxItems"].as_u64(), Some(MAX_CANDIDATES as u64));
    assert_eq!(line["locations"]["uniqueItems"], true);
    let limit = holdfast_server::api::STOCK_LIMIT;
    assert_eq!(schemas["SetStock"]["properties"]["on_hand"]["maximum"].as_i64(), Some(limit));
    assert_eq!(schemas["FulfilStock"]["properties"]["quantity"]["maximum"].as_i64(), Some(limit));
    let delta = schemas["AdjustStock"]["properties"]["delta"]["oneOf"].as_array().unwrap();
    let ranges: Vec<(i64, i64)> =
        delta.iter().map(|r| (r["minimum"].as_i64().unwrap(), r["maximum"].as_i64().unwrap())).collect();
    assert_eq!(ranges, [(-limit, -1), (1, limit)], "delta: non-zero");
    assert_eq!(schemas["CreateWebhook"]["properties"]["url"]["pattern"], holdfast_core::WEBHOOK_URL_PATTERN);
    // What the answers promise.
    assert_eq!(
        resolve(&doc, &schemas["ReservationBody"]["properties"]["status"])["enum"],
        serde_json::json!(["held", "claimed", "released", "expired"])
    );
    assert!(schemas["WebhookBody"]["properties"]["disabled_at"]["type"].as_array().unwrap().contains(&"null".into()));
}

/// The error codes of the README's table are the service's, status for status.
#[test]
fn the_readme_error_table_is_the_code_table() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let rows = readme
        .lines()
        .skip_while(|l| *l != "| code | HTTP | when |")
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>());
    let mut table = BTreeSet::new();
    for cells in rows {
        let status: u16 = cells[2].parse().unwrap_or_else(|_| panic!("README error table: {cells:?}"));
        for code in cells[1].split('/') {
            table.insert((status, code.trim().trim_matches('`').to_string()));
        }
    }
    let codes: BTreeSet<(u16, String)> = CODES.iter().map(|(s, c)| (*s, c.to_string())).collect();
    assert_eq!(table, codes, "README's error table against holdfast_server::error::CODES");
}

/// Answers the document promises and the contract check once found wrong:
/// integers written as whole floats (JSON Schema's `integer` includes
/// `5.0`), `/admin/audit?shop=` as a query parameter, a bracketed host, and
/// the framing answers with their headers and codes.
pub async fn answers_are_as_documented(b: holdfast_core::Backend) {
    use reqwest::{Method, StatusCode, header};
    use serde_json::json;

    crate::app::with_app(b, crate::app::no_tweak, |app| async move {
        let t = app.s1.clone();
        let (status, level) = app.put("/v1/shops/s1/items/a/locations/wh", &t, json!({ "on_hand": 5.0 })).await;
        assert_eq!((status, level["on_hand"].as_i64()), (StatusCode::OK, Some(5)), "{level}");
        let (status, level) = app.post("/v1/shops/s1/items/a/locations/wh/adjust", &t, json!({ "delta": 2e0 })).await;
        assert_eq!((status, level["on_hand"].as_i64()), (StatusCode::OK, Some(7)), "{level}");
        let cart = json!({ "key": "k", "lines": [{ "item": "a", "quantity": 2.0 }], "ttl_seconds": 60.0 });
        let (status, r) = app.post("/v1/shops/s1/reservations", &t, cart).await;
        assert_eq!((status, r["lines"][0]["quantity"].as_i64()), (StatusCode::CREATED, Some(2)), "{r}");
        let extend = format!("/v1/shops/s1/reservations/{}/extend", r["id"]);
        assert_eq!(app.post(&extend, &t, json!({ "ttl_seconds": 120.0 })).await.0, StatusCode::OK);
        for bad in [json!({ "ttl_seconds": 120.5 }), json!({ "ttl_seconds": 0.0 }), json!({ "ttl_seconds": "120" })] {
            let (status, err) = app.post(&extend, &t, bad.clone()).await;
            assert_eq!(
                (status, err["error"].as_str()),
                (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
                "{bad}"
            );
        }

        let (status, audit) = app.get("/admin/audit?shop=s1", &app.admin).await;
        assert_eq!((status, audit["ok"].as_bool()), (StatusCode::OK, Some(true)), "{audit}");
        let (status, _) = app.get("/admin/audit?shop=no%20such", &app.admin).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

        let hooks = "/v1/shops/s1/webhooks";
        for url in ["https://[::1]:8080/h", "https://x.example/\u{e9}"] {
            let (status, err) = app.post(hooks, &t, json!({ "url": url })).await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {err}");
        }

        let url = |path: &str| format!("{}{path}", app.base);
        let res = app.client.patch(url("/v1/shops/s1/reservations")).bearer_auth(&t).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(res.headers()[header::ALLOW], "POST");
        assert!(res.headers().contains_key("x-request-id"));
        assert_eq!(res.json::<serde_json::Value>().await.unwrap()["error"], "method_not_allowed");
        let res = app
            .client
            .post(url("/v1/shops/s1/reservations"))
            .bearer_auth(&t)
            .header(header::CONTENT_TYPE, "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(res.json::<serde_json::Value>().await.unwrap()["error"], "unsupported_media_type");
        let huge = json!({ "url": format!("https://x.example/{}", "a".repeat(300_000)) });
        let (status, err) = app.call(Method::POST, hooks, Some(&t), Some(huge)).await;
        assert_eq!((status, err["error"].as_str()), (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large")));
        let res = app.client.get(url("/v1/shops/s1/items/a")).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(res.headers()[header::WWW_AUTHENTICATE], "Bearer");
        app.stop().await;
    })
    .await;
}
