//! Strict JSON: an object that names a key twice is an error (with its line and column),
//! not "the last one wins" as `serde_json::Value` has it. A file with a duplicate key says
//! two things at once; sgc refuses to pick one. [`check_duplicate_keys`] runs a validating
//! pass over the text before it is parsed for real.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Every object of `text` (at any depth) has distinct keys; the error is serde_json's,
/// with the line and column where the repeated key ends.
pub fn check_duplicate_keys(text: &str) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    Distinct::deserialize(&mut de)?;
    Ok(())
}

/// Any JSON value whose objects have distinct keys (nothing is kept).
struct Distinct;

impl<'de> Deserialize<'de> for Distinct {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DistinctVisitor)
    }
}

struct DistinctVisitor;

impl<'de> Visitor<'de> for DistinctVisitor {
    type Value = Distinct;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_str<E>(self, _: &str) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_unit<E>(self) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_none<E>(self) -> Result<Distinct, E> {
        Ok(Distinct)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Distinct, D::Error> {
        Distinct::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Distinct, A::Error> {
        while seq.next_element::<Distinct>()?.is_some() {}
        Ok(Distinct)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Distinct, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!(
                    "duplicate key `{key}` in one object: keep one"
                )));
            }
            map.next_value::<Distinct>()?;
        }
        Ok(Distinct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_with_their_line() {
        assert!(check_duplicate_keys(r#"{"a": 1, "b": [1, {"c": 2.5e3}], "d": null}"#).is_ok());
        let e = check_duplicate_keys("{\n \"a\": 1,\n \"a\": 2\n}").unwrap_err();
        assert!(e.to_string().contains("duplicate key `a`"), "{e}");
        assert_eq!(e.line(), 3);
        let nested = check_duplicate_keys(r#"{"x": [{"k": 1, "k": 1}]}"#).unwrap_err();
        assert!(nested.to_string().contains("`k`"), "{nested}");
    }
}
