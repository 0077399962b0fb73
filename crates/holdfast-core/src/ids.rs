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
        let n = integer(d)?;
        Self::new(n).map_err(serde::de::Error::custom)
    }
}

/// A 64-bit integer as JSON (and JSON Schema's `integer`) counts them: `3`,
/// or a number with no fractional part such as `3.0` or `3e0`, which some
/// encoders write for a whole number. For `#[serde(deserialize_with)]`.
pub fn integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    struct Integer;
    impl serde::de::Visitor<'_> for Integer {
        type Value = i64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer")
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<i64, E> {
            // 2^63, exactly: every whole f64 below it (and from -2^63) is an i64.
            const LIMIT: f64 = 9_223_372_036_854_775_808.0;
            if v.fract() == 0.0 && (-LIMIT..LIMIT).contains(&v) {
                Ok(v as i64)
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
            }
        }
    }
    d.deserialize_any(Integer)
}

/// [`integer`] for an optional field (absent or `null`: `None`); use with
/// `#[serde(default)]`.
pub fn optional_integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    struct Wrap(#[serde(deserialize_with = "integer")] i64);
    Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
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

/// The OpenAPI schemas of the identifiers, from the same rules and limits
/// their constructors check, so the HTTP document cannot drift from them.
#[cfg(feature = "openapi")]
mod openapi {
    use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
    use utoipa::openapi::{KnownFormat, RefOr, SchemaFormat};
    use utoipa::{Number, PartialSchema, ToSchema};

    use super::{ConnTag, IdempotencyKey, ItemId, LocationId, Quantity, ReservationId, ShopId};

    fn text(pattern: String, max: usize, description: &str, example: &str) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pattern))
            .min_length(Some(1))
            .max_length(Some(max))
            .description(Some(description))
            .examples([example])
            .into()
    }

    /// A whole number from 1 to `max`: what the constructors of the numeric
    /// newtypes accept, in the width (`format`) they are stored in.
    fn positive(format: KnownFormat, max: impl Into<Number>, description: &str, examples: &[i64]) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(format)))
            .minimum(Some(1))
            .maximum(Some(max))
            .description(Some(description))
            .examples(examples.iter().copied())
            .into()
    }

    macro_rules! name_schema {
        ($name:ident, $description:literal, $example:literal) => {
            impl PartialSchema for $name {
                fn schema() -> RefOr<Schema> {
                    let max = $name::MAX_LEN;
                    text(format!("^[A-Za-z0-9_.:-]{{1,{max}}}$"), max, $description, $example)
                }
            }
            impl ToSchema for $name {}
        };
    }

    name_schema!(ShopId, "A shop: 1 to 64 of A-Z a-z 0-9 _ - . :", "demo");
    name_schema!(ItemId, "An item (SKU or variant): 1 to 64 of A-Z a-z 0-9 _ - . :", "sku-1");
    name_schema!(LocationId, "A stock location: 1 to 64 of A-Z a-z 0-9 _ - . :", "wh");
    name_schema!(
        IdempotencyKey,
        "The caller's idempotency key, unique per shop (e.g. the checkout token): 1 to 128 of A-Z a-z 0-9 _ - . :",
        "checkout-7f3a"
    );

    impl PartialSchema for ConnTag {
        fn schema() -> RefOr<Schema> {
            let max = ConnTag::MAX_LEN;
            text(
                format!("^[a-z0-9_]{{1,{max}}}$"),
                max,
                "The caller's business process, named in every SQL statement sent for the request: 1 to 64 of a-z 0-9 _",
                "checkout_completion",
            )
        }
    }
    impl ToSchema for ConnTag {}

    impl PartialSchema for ReservationId {
        fn schema() -> RefOr<Schema> {
            let description = "A reservation, as the store numbered it: a positive 64-bit integer";
            positive(KnownFormat::Int64, i64::MAX, description, &[41])
        }
    }
    impl ToSchema for ReservationId {}

    impl PartialSchema for Quantity {
        fn schema() -> RefOr<Schema> {
            positive(KnownFormat::Int32, Quantity::MAX, "Units of one cart line: 1 to 10000", &[])
        }
    }
    impl ToSchema for Quantity {}
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

    #[test]
    fn whole_numbers_written_as_floats_are_integers() {
        let q = |json: &str| serde_json::from_str::<Quantity>(json).map(Quantity::get);
        assert_eq!(q("3").unwrap(), 3);
        assert_eq!(q("3.0").unwrap(), 3);
        assert_eq!(q("3e0").unwrap(), 3);
        for bad in ["3.5", "0.0", "1e300", "-1", "\"3\"", "99999999999999999999"] {
            assert!(q(bad).is_err(), "{bad} accepted");
        }
        #[derive(Deserialize)]
        struct T {
            #[serde(default, deserialize_with = "optional_integer")]
            n: Option<i64>,
        }
        let n = |json: &str| serde_json::from_str::<T>(json).map(|t| t.n);
        assert_eq!(n("{}").unwrap(), None);
        assert_eq!(n(r#"{"n": null}"#).unwrap(), None);
        assert_eq!(n(r#"{"n": -9.0}"#).unwrap(), Some(-9));
        assert!(n(r#"{"n": 1.25}"#).is_err());
    }
}
