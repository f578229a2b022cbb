//! JSON objects with a key given twice. serde_json keeps the last value and
//! says nothing, so `{"rate": 1, "rate": 1000}` would quietly mean 1000; the
//! control socket refuses such a line instead.

use std::{collections::HashSet, fmt};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// The first key that appears twice in one object of `line`, at any depth.
/// A line that is not JSON has none (parsing it reports the syntax error).
pub fn duplicate_key(line: &[u8]) -> Option<String> {
    let mut found = None;
    let mut deserializer = serde_json::Deserializer::from_slice(line);
    let _ = Walk { found: &mut found }.deserialize(&mut deserializer);
    found
}

/// Visits every value, stopping at the first duplicate key.
struct Walk<'a> {
    found: &'a mut Option<String>,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk { found: &mut *self.found })?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                *self.found = Some(key);
                return Err(de::Error::custom("duplicate key"));
            }
            map.next_value_seed(Walk { found: &mut *self.found })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::duplicate_key;

    #[test]
    fn a_key_given_twice_is_found_at_any_depth() {
        let table = [
            (r#"{"op":"status"}"#, None),
            (r#"{"op":"set_class","rate":1,"rate":1000}"#, Some("rate")),
            (r#"{"op":"sample","samples":[{"class":"a"},{"class":"a","class":"b"}]}"#, Some("class")),
            (r#"{"a":{"x":1},"b":{"x":2}}"#, None),
            (r#"{"a":"\u0061","\u0061":1}"#, Some("a")),
            ("{not json", None),
        ];
        for (line, want) in table {
            assert_eq!(duplicate_key(line.as_bytes()).as_deref(), want, "{line}");
        }
    }
}
