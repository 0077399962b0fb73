//! Thousands of generated requests at every route: mangled JSON, wrong
//! types, out-of-range and overflowing numbers, unknown fields, hostile ids
//! in the path, wrong methods, missing or foreign tokens. Never a 5xx, and
//! after every 4xx the state (levels and known reservations, read straight
//! from the store) is what it was. Seeded: a failure prints its seed and case.

use holdfast_core::{Backend, ItemId, ReservationId, ReservationStatus, ShopId};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::app::{TestApp, no_tweak, stock, with_app};

const CASES: usize = 1_500;

/// What may change: every level of the items the generator names, and every
/// reservation it knows of.
async fn snapshot(app: &TestApp, ids: &[i64]) -> String {
    let store = &app.db.store;
    let mut out = String::new();
    for shop in ["s1", "s2"] {
        let shop = ShopId::new(shop).unwrap();
        for item in ["a", "b"] {
            let l = store.levels(&shop, &ItemId::new(item).unwrap()).await.expect("levels");
            out.push_str(&format!("{l:?}\n"));
        }
        for id in ids {
            let r = store.get(&shop, ReservationId::new(*id).unwrap()).await;
            out.push_str(&format!("{:?}\n", r.map(|r| (r.status, r.expires_at, r.lines)).map_err(|e| e.code())));
        }
    }
    out
}

/// Releases every known hold that would expire before the run ends. A short
/// TTL is a valid request the generator may send; but once such a hold
/// passes its expiry, levels count its units as available again with no
/// request made, which would read as a change after the next 4xx.
async fn release_short_holds(app: &TestApp, ids: &[i64]) {
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    for shop in ["s1", "s2"] {
        let shop = ShopId::new(shop).unwrap();
        for id in ids {
            let id = ReservationId::new(*id).unwrap();
            if let Ok(r) = app.db.store.get(&shop, id).await
                && r.status == ReservationStatus::Held
                && r.expires_at < soon
            {
                app.db.store.release(&shop, id).await.expect("release a short hold");
            }
        }
    }
}

fn pick<'a, T: ?Sized>(rng: &mut StdRng, xs: &'a [&'a T]) -> &'a T {
    xs.choose(rng).unwrap()
}

fn weird_number(rng: &mut StdRng) -> Value {
    let xs = [
        json!(0),
        json!(-1),
        json!(10_001),
        json!(i64::MAX),
        json!(i64::MIN),
        json!(u64::MAX),
        json!(1.5),
        json!(1e300),
        json!(-0.0),
        json!(4_000_000_000u64),
        json!(1_000_000_001),
    ];
    xs.choose(rng).unwrap().clone()
}

fn any_value(rng: &mut StdRng, depth: u32) -> Value {
    match rng.gen_range(0..10) {
        0 => Value::Null,
        1 => json!(rng.r#gen::<bool>()),
        2 => weird_number(rng),
        3 => json!(rng.gen_range(-3..20)),
        4 => json!(pick(
            rng,
            &["", "a", "b", "s1", "wh", "a b", "a'b", "*/", "é", "\u{0}", "hf_", "9999999999999999999999"]
        )),
        5 => json!("x".repeat(rng.gen_range(60..300))),
        6 if depth < 4 => Value::Array((0..rng.gen_range(0..4)).map(|_| any_value(rng, depth + 1)).collect()),
        7 if depth < 4 => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.gen_range(0..4) {
                m.insert(pick(rng, &["item", "quantity", "key", "lines", "zz"]).to_string(), any_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!(rng.gen_range(1..4)),
    }
}

fn valid_line(rng: &mut StdRng) -> Value {
    let mut line = json!({ "item": pick(rng, &["a", "b"]), "quantity": rng.gen_range(1..4) });
    if rng.gen_bool(0.3) {
        line["locations"] = json!([pick(rng, &["wh", "store"])]);
    }
    line
}

/// A valid body for the route, then a few mutations.
fn body_for(rng: &mut StdRng, route: &str) -> Value {
    let mut v = match route {
        "create" => {
            let lines: Vec<Value> = (0..rng.gen_range(1..3)).map(|_| valid_line(rng)).collect();
            // Only long holds: an expired one could be released by a refused
            // reserve (inline expiry), which is a legitimate change.
            json!({ "key": format!("fz-{}", rng.gen_range(0..40)), "lines": lines, "ttl_seconds": pick(rng, &[&3600, &86_400]) })
        }
        "extend" => json!({ "ttl_seconds": pick(rng, &[&3600, &86_400]) }),
        "set" => json!({ "on_hand": rng.gen_range(0..30) }),
        "adjust" => json!({ "delta": rng.gen_range(-5..6) }),
        "fulfil" => json!({ "quantity": rng.gen_range(1..3) }),
        _ => json!({}),
    };
    for _ in 0..rng.gen_range(0..4) {
        match rng.gen_range(0..9) {
            0 => v = any_value(rng, 0),
            1 => {
                if let Some(m) = v.as_object_mut()
                    && let Some(k) = m.keys().cloned().collect::<Vec<_>>().choose(rng)
                {
                    m.remove(k);
                }
            }
            2 | 3 => {
                if let Some(m) = v.as_object_mut()
                    && let Some(k) = m.keys().cloned().collect::<Vec<_>>().choose(rng)
                {
                    let new = if rng.gen_bool(0.5) { weird_number(rng) } else { any_value(rng, 1) };
                    m.insert(k.clone(), new);
                }
            }
            4 => {
                if let Some(m) = v.as_object_mut() {
                    m.insert(pick(rng, &["allow_partail", "extra", "ttl", "qty"]).to_string(), json!(1));
                }
            }
            5 => {
                // Earlier mutations may have left lines that are not objects;
                // `line[field] = …` would panic on those, so insert through the map.
                if let Some(lines) = v.get_mut("lines").and_then(Value::as_array_mut)
                    && let Some(line) = lines.choose_mut(rng).and_then(Value::as_object_mut)
                {
                    let field = pick(rng, &["item", "quantity", "locations", "warehouse"]).to_string();
                    line.insert(field, if rng.gen_bool(0.5) { weird_number(rng) } else { any_value(rng, 2) });
                }
            }
            6 => {
                if v.get("lines").is_some() {
                    let n = *[0usize, 101, 150].choose(rng).unwrap();
                    v["lines"] =
                        Value::Array((0..n).map(|i| json!({ "item": format!("i{i}"), "quantity": 1 })).collect());
                }
            }
            7 => {
                if let Some(lines) = v.get_mut("lines").and_then(Value::as_array_mut)
                    && let Some(first) = lines.first().cloned()
                {
                    lines.push(first); // the same item twice
                }
            }
            _ => {
                if let Some(lines) = v.get_mut("lines").and_then(Value::as_array_mut)
                    && let Some(line) = lines.first_mut().and_then(Value::as_object_mut)
                {
                    line.insert(
                        "locations".into(),
                        json!(pick(rng, &[&json!([]), &json!(["wh", "wh"]), &json!(["a b"])])),
                    );
                }
            }
        }
    }
    v
}

/// Raw bytes that are not the JSON the route wants.
fn raw_body(rng: &mut StdRng, json: &Value) -> Vec<u8> {
    let text = json.to_string();
    match rng.gen_range(0..5) {
        0 => text.as_bytes()[..rng.gen_range(0..=text.len())].to_vec(),
        1 => (0..rng.gen_range(0..200)).map(|_| rng.r#gen::<u8>()).collect(),
        2 => format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes(),
        3 => vec![0xff, 0xfe, b'{', b'}'],
        _ => format!("{text}{text}").into_bytes(),
    }
}

pub async fn generated_bodies_never_5xx_and_4xx_change_nothing(b: Backend) {
    with_app(b, no_tweak, |app| async move {
        let seed: u64 =
            std::env::var("HOLDFAST_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
        // Printed first, so that any failure (even a panic in the generator)
        // comes with the seed that reproduces it.
        eprintln!("fuzz {}: HOLDFAST_FUZZ_SEED={seed}", app.db.backend.name());
        let mut rng = StdRng::seed_from_u64(seed);
        for (shop, token) in [("s1", &app.s1), ("s2", &app.s2)] {
            for item in ["a", "b"] {
                stock(&app, token, shop, item, "wh", 20).await;
            }
        }
        let mut ids = Vec::new();
        // Long holds, like the generator's: with the default 600 s, a run
        // slower than that (about 35 s on an idle machine) would see a seed
        // hold expire, and a refused claim or reserve expiring it is a
        // legitimate change after a 4xx.
        for (k, item) in [("seed-1", "a"), ("seed-2", "b")] {
            let (_, r) = app
                .post(
                    "/v1/shops/s1/reservations",
                    &app.s1,
                    json!({ "key": k, "lines": [{ "item": item, "quantity": 1 }], "ttl_seconds": 86_400 }),
                )
                .await;
            ids.push(r["id"].as_i64().unwrap());
        }
        let mut before = snapshot(&app, &ids).await;
        let mut counts = std::collections::BTreeMap::<u16, u32>::new();

        for case in 0..CASES {
            let route =
                *["create", "get", "claim", "release", "extend", "set", "adjust", "fulfil", "levels", "audit", "bogus"]
                    .choose(&mut rng)
                    .unwrap();
            let shop = if rng.gen_bool(0.85) {
                "s1".to_string()
            } else {
                pick(&mut rng, &["s2", "a%20b", "%ff", "..", "x*y", &"s".repeat(70), "s1%2Fx"]).to_string()
            };
            let id = if rng.gen_bool(0.7) {
                ids.choose(&mut rng).unwrap().to_string()
            } else {
                pick(
                    &mut rng,
                    &["0", "-5", "99999999999999999999", "9223372036854775808", "1e3", "abc", "%00", "1.0", "+1"],
                )
                .to_string()
            };
            let item = pick(&mut rng, &["a", "b", "a", "%20", "i*", &"i".repeat(65)]).to_string();
            let r = format!("/v1/shops/{shop}/reservations/{id}");
            let at = format!("/v1/shops/{shop}/items/{item}/locations/wh");
            let (method, path) = match route {
                "create" => (Method::POST, format!("/v1/shops/{shop}/reservations")),
                "get" => (Method::GET, r),
                "claim" => (Method::POST, format!("{r}/claim")),
                "release" => (Method::POST, format!("{r}/release")),
                "extend" => (Method::POST, format!("{r}/extend")),
                "set" => (Method::PUT, at),
                "adjust" => (Method::POST, format!("{at}/adjust")),
                "fulfil" => (Method::POST, format!("{at}/fulfil")),
                "levels" => (Method::GET, format!("/v1/shops/{shop}/items/{item}")),
                "audit" => (Method::GET, format!("/admin/audit?shop={shop}")),
                _ => {
                    (Method::POST, format!("/v1/{}", pick(&mut rng, &["nope", "shops", "shops/s1", "shops/s1/items"])))
                }
            };
            // Now and then the wrong method for the route.
            let method = if rng.gen_bool(0.05) { Method::DELETE } else { method };
            let token = match rng.gen_range(0..20) {
                0 => None,
                1 => Some("hf_0000000000000000_00".to_string()),
                2 => Some(app.s2.clone()),
                3 => Some(app.admin.clone()),
                _ => Some(app.s1.clone()),
            };
            let json_body = body_for(&mut rng, route);
            let mut req = app.client.request(method.clone(), format!("{}{path}", app.base));
            if let Some(t) = &token {
                req = req.bearer_auth(t);
            }
            let sent = match rng.gen_range(0..10) {
                0 => {
                    let bytes = raw_body(&mut rng, &json_body);
                    let shown = String::from_utf8_lossy(&bytes).chars().take(200).collect::<String>();
                    req = req.header("content-type", "application/json").body(bytes);
                    shown
                }
                1 => {
                    req = req.header("content-type", "text/plain").body(json_body.to_string());
                    format!("text/plain {json_body}")
                }
                _ => {
                    req = req.json(&json_body);
                    json_body.to_string()
                }
            };
            let res = req.send().await.expect("request sent");
            let status = res.status();
            let body = res.text().await.unwrap_or_default();
            let what = format!("seed {seed} case {case}: {method} {path} {sent:.300} -> {status} {body:.300}");
            *counts.entry(status.as_u16()).or_default() += 1;
            assert!(status.as_u16() < 500, "{what}");
            if status.is_client_error() {
                let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("error body is not JSON: {what}"));
                assert!(v["error"].is_string() && v["message"].is_string(), "{what}");
                let after = snapshot(&app, &ids).await;
                assert_eq!(before, after, "state changed after a {status}: {what}");
            } else {
                assert!(status.is_success(), "{what}");
                if status == StatusCode::CREATED
                    && let Some(id) = serde_json::from_str::<Value>(&body).ok().and_then(|v| v["id"].as_i64())
                {
                    ids.push(id);
                }
                release_short_holds(&app, &ids).await;
                before = snapshot(&app, &ids).await;
            }
        }
        eprintln!("fuzz {}: seed {seed}, statuses {counts:?}", app.db.backend.name());
        assert!(counts.keys().any(|s| (200..300).contains(s)), "nothing succeeded: the generator is off");
        app.db.assert_audit_clean().await;
        app.stop().await;
    })
    .await;
}
