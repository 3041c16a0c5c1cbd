//! `Duration` as fractional seconds in JSON (`1.5`), the unit users write.

/// `Option<Duration>` as `null` or seconds.
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `None` as `null`, `Some(d)` as `d.as_secs_f64()`.
    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    /// Reads `null` or a non-negative, finite number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(secs) => Duration::try_from_secs_f64(secs)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// `Duration` as seconds.
pub mod required {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `d.as_secs_f64()`.
    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(value.as_secs_f64())
    }

    /// Reads a non-negative, finite number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}
