//! Strict JSON: an object that names a key twice is an error (with its line and column),
//! not "the last one wins" as `serde_json::Value` has it. A file with a duplicate key says
//! two things at once; sgc refuses to pick one. [`check_duplicate_keys`] runs a validating
//! pass over the text before it is parsed for real.
//!
//! The same pass refuses an object with the key `$serde_json::private::Number`. With the
//! `arbitrary_precision` feature (enabled for the whole workspace, so that `1e999` or a
//! 30-digit shape is seen as written), serde_json hands every number to a visitor as a
//! one-entry map under that key, and `serde_json::Value` reads a JSON *object* with that
//! key as the number its string spells: `{"$serde_json::private::Number": "4"}` would load
//! as the shape entry `4`. The pass tells the two apart by how the entry's value arrives: a
//! real number's digits come as an owned `String` (`visit_string`), a JSON string from the
//! text never does (`visit_str` or `visit_borrowed_str`). A test pins this down.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Every object of `text` (at any depth) has distinct keys and none poses as a number (see
/// the module docs); the error is serde_json's, with the line and column where the
/// offending key (or its value) ends.
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
            if key == NUMBER_TOKEN {
                map.next_value::<NumberDigits>()?;
            } else {
                map.next_value::<Distinct>()?;
            }
        }
        Ok(Distinct)
    }
}

/// The key under which serde_json (`arbitrary_precision`) passes a number's digits.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// The value under [`NUMBER_TOKEN`]: a number's digits when serde_json made the entry
/// (an owned `String`); anything else came from the text, an object posing as a number.
struct NumberDigits;

impl<'de> Deserialize<'de> for NumberDigits {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberDigitsVisitor)
    }
}

struct NumberDigitsVisitor;

impl<'de> Visitor<'de> for NumberDigitsVisitor {
    type Value = NumberDigits;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }

    fn visit_string<E>(self, _: String) -> Result<NumberDigits, E> {
        Ok(NumberDigits)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<NumberDigits, E> {
        Err(posing_as_number())
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<NumberDigits, A::Error> {
        Err(posing_as_number())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<NumberDigits, A::Error> {
        Err(posing_as_number())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<NumberDigits, E> {
        Err(posing_as_number())
    }
    fn visit_unit<E: de::Error>(self) -> Result<NumberDigits, E> {
        Err(posing_as_number())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<NumberDigits, E> {
        Err(posing_as_number())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<NumberDigits, E> {
        Err(posing_as_number())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<NumberDigits, E> {
        Err(posing_as_number())
    }
}

fn posing_as_number<E: de::Error>() -> E {
    de::Error::custom(format!(
        "an object with the key `{NUMBER_TOKEN}` is refused: the JSON reader would take it for a number; write the number itself"
    ))
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

    /// Real numbers of every form pass; an object spelling the private number key is
    /// refused whatever its value (`serde_json::Value` alone would read it as a number).
    #[test]
    fn objects_posing_as_numbers_are_refused() {
        let numbers = r#"[0, -1, 4, 2.5e3, 1e999, 18446744073709551616, -0.0, {"n": 7}]"#;
        assert!(check_duplicate_keys(numbers).is_ok());
        let v: serde_json::Value = serde_json::from_str(r#"{"$serde_json::private::Number": "4"}"#)
            .expect("serde_json reads it");
        assert!(
            v.is_number(),
            "serde_json no longer reads the key as a number: {v}"
        );
        for fake in [
            r#"[{"$serde_json::private::Number": "4"}]"#,
            "{\"$serde_json::private::Number\": \"4\"}",
            r#"{"$serde_json::private::Number": "\u0034"}"#,
            r#"{"a": 1, "$serde_json::private::Number": 4}"#,
            r#"{"$serde_json::private::Number": {"x": 1}}"#,
            r#"{"\u0024serde_json::private::Number": "4"}"#,
        ] {
            let e = check_duplicate_keys(fake).expect_err(fake);
            assert!(
                e.to_string().contains("write the number itself"),
                "{fake}: {e}"
            );
            assert_eq!(e.line(), 1, "{fake}");
        }
    }
}
