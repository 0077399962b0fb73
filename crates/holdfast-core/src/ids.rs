//! Identifiers and bounded values, parsed once at the edge so that an invalid
//! value can never reach a store ("parse, don't validate").

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Invalid;

/// Characters allowed in shop, item, location and idempotency-key names. They
/// are safe in URLs, SQL literals, Redis keys and log lines without escaping.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Longest accepted value, in bytes.
            pub const MAX_LEN: usize = $max;

            pub fn new(value: impl Into<String>) -> Result<Self, Invalid> {
                let value = value.into();
                if value.is_empty() || value.len() > $max || !value.chars().all(is_name_char) {
                    return Err(Invalid::new(
                        $field,
                        format!(
                            "must be 1 to {} characters of A-Z a-z 0-9 _ - . : (got {:?})",
                            $max,
                            truncate(&value)
                        ),
                    ));
                }
                Ok(Self(value))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = Invalid;
            fn from_str(s: &str) -> Result<Self, Invalid> {
                Self::new(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

name_type!(
    /// A tenant. Every table leads with it and no query crosses shops.
    ShopId, "shop", 64
);
name_type!(
    /// An inventory item (SKU or variant).
    ItemId, "item", 64
);
name_type!(
    /// A stock location (warehouse, store).
    LocationId, "location", 64
);
name_type!(
    /// The caller's idempotency key for a reserve, unique per shop (e.g. a
    /// checkout token).
    IdempotencyKey, "key", 128
);

/// The name of a business process, put into a comment at the head of every
/// SQL statement sent on its behalf (`/* conn_tag:checkout_completion */`).
/// `[a-z0-9_]{1,64}`: nothing that could close the comment can get in.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ConnTag(String);

impl ConnTag {
    pub const MAX_LEN: usize = 64;

    pub fn new(value: impl Into<String>) -> Result<Self, Invalid> {
        let value = value.into();
        let ok = !value.is_empty()
            && value.len() <= Self::MAX_LEN
            && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(Invalid::new(
                "conn_tag",
                format!("must be 1 to 64 characters of a-z 0-9 _ (got {:?})", truncate(&value)),
            ));
        }
        Ok(Self(value))
    }

    /// For the fixed operation names holdfast uses itself.
    pub fn from_static(value: &'static str) -> Self {
        Self::new(value).expect("operation tags are valid")
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConnTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ConnTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl FromStr for ConnTag {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        Self::new(s)
    }
}

impl<'de> Deserialize<'de> for ConnTag {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Self::new(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A reservation's id: positive, assigned by the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReservationId(i64);

impl ReservationId {
    pub fn new(id: i64) -> Result<Self, Invalid> {
        if id <= 0 {
            return Err(Invalid::new("id", format!("must be a positive integer (got {id})")));
        }
        Ok(Self(id))
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for ReservationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for ReservationId {
    type Err = Invalid;
    fn from_str(s: &str) -> Result<Self, Invalid> {
        let id: i64 = s
            .parse()
            .map_err(|_| Invalid::new("id", format!("must be a positive 64-bit integer (got {:?})", truncate(s))))?;
        Self::new(id)
    }
}

/// Units of one cart line: 1 to 10,000.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Quantity(u32);

impl Quantity {
    pub const MAX: u32 = 10_000;

    pub fn new(n: i64) -> Result<Self, Invalid> {
        if !(1..=Self::MAX as i64).contains(&n) {
            return Err(Invalid::new("quantity", format!("must be between 1 and {} (got {n})", Self::MAX)));
        }
        Ok(Self(n as u32))
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        Self::new(n).map_err(serde::de::Error::custom)
    }
}

/// How long a hold lives: 1 second to 24 hours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(Duration);

impl Ttl {
    pub const MIN_SECS: u64 = 1;
    pub const MAX_SECS: u64 = 24 * 60 * 60;
    pub const DEFAULT: Ttl = Ttl(Duration::from_secs(600));

    pub fn from_secs(secs: i64) -> Result<Self, Invalid> {
        if !(Self::MIN_SECS as i64..=Self::MAX_SECS as i64).contains(&secs) {
            return Err(Invalid::new(
                "ttl_seconds",
                format!("must be between {} and {} seconds (got {secs})", Self::MIN_SECS, Self::MAX_SECS),
            ));
        }
        Ok(Self(Duration::from_secs(secs as u64)))
    }

    pub fn as_secs(self) -> u64 {
        self.0.as_secs()
    }

    pub fn as_duration(self) -> Duration {
        self.0
    }
}

impl Default for Ttl {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reject_what_could_escape_a_context() {
        for bad in ["", "a b", "a'b", "a/b", "a*/", "é", "a\nb", &"x".repeat(65)] {
            assert!(ShopId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(ShopId::new("shop-1.eu:main_2").is_ok());
        assert!(IdempotencyKey::new("k".repeat(128)).is_ok());
    }

    #[test]
    fn conn_tags_cannot_close_a_comment() {
        for bad in ["", "a*/b", "*/", "a b", "A", "é", "a\nb", "a'b", "a-b", "a/*", &"x".repeat(65)] {
            assert!(ConnTag::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(ConnTag::new("checkout_completion_2").is_ok());
    }

    #[test]
    fn bounded_numbers() {
        assert!(Quantity::new(0).is_err());
        assert!(Quantity::new(-1).is_err());
        assert!(Quantity::new(10_001).is_err());
        assert_eq!(Quantity::new(10_000).unwrap().get(), 10_000);
        assert!(Ttl::from_secs(0).is_err());
        assert!(Ttl::from_secs(86_401).is_err());
        assert!(ReservationId::new(0).is_err());
        assert!("99999999999999999999".parse::<ReservationId>().is_err());
    }
}
