//! The audit against books that do not balance: rows changed behind the
//! store's back must show as breaches and orphans, on every dialect.

use holdfast_core::{Backend, ReservationStatus};
use holdfast_sql::StoreConfig;
use holdfast_testkit::per_backend;
use holdfast_testkit::*;

async fn books_that_do_not_balance_are_reported(b: Backend) {
    with_db(b, StoreConfig::default(), |db| async move {
        stock(&*db.store, "s1", "a", "wh", 10).await;
        stock(&*db.store, "s2", "b", "wh", 4).await;
        let r = db.store.reserve(&request("s1", "k", vec![line("a", 3, None)])).await.unwrap().reservation;
        assert_eq!(db.store.claim(&shop("s1"), r.id).await.unwrap().status, ReservationStatus::Claimed);
        db.assert_audit_clean().await;
        let clean = db.store.audit(None).await.unwrap();
        assert_eq!(clean.checked, 2);

        db.exec(&[
            // A unit sold twice: on_hand no longer covers the books.
            "UPDATE inventory_levels SET on_hand = on_hand - 1 WHERE shop_id = 's1'",
            // A pool row of an (item, location) no ledger row knows.
            "INSERT INTO reservation_units (shop_id, item_id, location_id, id) VALUES ('s2', 'ghost', 'wh', 0)",
        ])
        .await;
        let all = db.store.audit(None).await.unwrap();
        assert!(!all.ok());
        assert_eq!(all.checked, 2, "orphans are not ledger rows");
        assert_eq!(all.breaches.len(), 1, "{all:#?}");
        let breach = &all.breaches[0];
        assert_eq!((breach.shop.as_str(), breach.item.as_str(), breach.on_hand), ("s1", "a", 9));
        assert_eq!(breach.unpooled + breach.pooled + breach.reserved + breach.committed, 10, "{breach:?}");
        assert_eq!(breach.committed, 3, "{breach:?}");
        assert_eq!(all.orphans.len(), 1, "{all:#?}");
        let orphan = &all.orphans[0];
        assert_eq!((orphan.shop.as_str(), orphan.item.as_str(), orphan.pooled, orphan.reserved), ("s2", "ghost", 1, 0));

        // One shop's audit sees only that shop.
        let s2 = db.store.audit(Some(&shop("s2"))).await.unwrap();
        assert_eq!((s2.checked, s2.breaches.len(), s2.orphans.len()), (1, 0, 1));
        let s1 = db.store.audit(Some(&shop("s1"))).await.unwrap();
        assert_eq!((s1.checked, s1.breaches.len(), s1.orphans.len()), (1, 1, 0));
    })
    .await;
}

per_backend!(books_that_do_not_balance_are_reported: postgres => Postgres, mysql => MySql, sqlite => Sqlite);
