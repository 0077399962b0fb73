//! `holdfast worker` killed with SIGKILL while its batch is in flight: no
//! delivery is lost; what was in flight is sent again (same `webhook-id`)
//! once its lease runs out, and nothing else twice.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use holdfast_core::{Backend, DeliveryStatus, Topics};
use holdfast_sql::StoreConfig;
use holdfast_testkit::receiver::{Receiver, ok};
use holdfast_testkit::*;

/// `holdfast worker` on `url`, its output discarded; killed on drop.
struct Worker(Child);

impl Worker {
    fn start(url: &str) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_holdfast"))
            .args(["worker", "--database-url", url, "--webhook-workers", "1", "--webhook-lease-ms", "10500"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("holdfast worker starts");
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn a_killed_worker_loses_no_delivery(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        let rx = Receiver::start(ok, 0).await;
        let shop = shop("s1");
        let held = [holdfast_core::Topic::ReservationHeld].into_iter().collect::<Topics>();
        holdfast_server::webhooks::subscribe(&*db.db.webhooks, &shop, &rx.url("/hook"), held).await.unwrap();
        stock(&*db.store, "s1", "a", "wh", 100).await;
        for i in 0..50 {
            db.store.reserve(&request("s1", &format!("k{i}"), vec![line("a", 1, None)])).await.unwrap();
        }
        rx.stall();
        let first = Worker::start(&db.url);
        let deadline = Instant::now() + Duration::from_secs(30);
        while rx.got().len() < 32 {
            assert!(Instant::now() < deadline, "the worker sent {} of its first batch", rx.got().len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Its whole first batch (32) is in flight: SIGKILL.
        drop(first);
        let in_flight: HashSet<String> = rx.got().iter().map(|g| g.id.clone()).collect();
        assert_eq!(in_flight.len(), 32);
        rx.unstall();
        let _second = Worker::start(&db.url);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let delivered = db.db.webhooks.list_deliveries(&shop, Some(DeliveryStatus::Delivered), 100).await.unwrap();
            if delivered.len() == 50 {
                assert_eq!(delivered.iter().filter(|d| d.attempts == 2).count(), 32);
                break;
            }
            assert!(Instant::now() < deadline, "{} of 50 delivered", delivered.len());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut times: HashMap<String, u32> = HashMap::new();
        for g in rx.got() {
            *times.entry(g.id).or_default() += 1;
        }
        assert_eq!(times.len(), 50, "every event arrived");
        for (id, n) in times {
            assert_eq!(n, if in_flight.contains(&id) { 2 } else { 1 }, "{id}");
        }
    })
    .await;
}

holdfast_testkit::per_backend!(a_killed_worker_loses_no_delivery: postgres => Postgres, mysql => MySql, sqlite => Sqlite);
