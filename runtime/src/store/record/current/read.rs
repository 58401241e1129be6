//! Reading an [`EventRecord`] from its stored JSON without serde's second copy of it.
//!
//! Why: `EventRecord` holds its kind flattened, and the kind is internally tagged (`type`).
//! serde's derived reading of that buffers every field of the record into its generic content
//! tree, then buffers them all again (a copy of each string) while it looks for the tag, and
//! only then builds the variant: two allocations and copies of every field, which made a
//! stored event cost about 12,000 instructions to read (recovery's replay of the log, the feed
//! past the tail kept in memory). Every record this code writes begins `seq`, `at_ms`,
//! `tenant` (the struct's order); read in that order, the kind can be handed the rest of the
//! object directly, and serde buffers it once.
//!
//! Anything else (another order, a repeated key, a value of the wrong type, a record no build
//! reads) is read again by the derived reading, which gives what it always gave, its error
//! messages included. So this is only ever a quicker way to the same result.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::{EventRecord, KindRecord};

/// The record stored as `bytes`: read in the written order when it is in it, else by serde's
/// derived reading (see the module documentation).
pub fn event_record(bytes: &[u8]) -> serde_json::Result<EventRecord> {
    in_written_order(bytes).or_else(|_| serde_json::from_slice(bytes))
}

/// The record, if `bytes` hold it in the order this code writes it.
pub(in crate::store) fn in_written_order(bytes: &[u8]) -> serde_json::Result<EventRecord> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let record = reader.deserialize_map(WrittenOrder)?;
    reader.end()?;
    Ok(record)
}

/// The keys read before the kind, in this order.
const HEAD_KEYS: [&str; 3] = ["seq", "at_ms", "tenant"];

/// Reads `seq`, `at_ms` and `tenant` as the first three keys, then the kind from the rest.
struct WrittenOrder;

impl<'de> Visitor<'de> for WrittenOrder {
    type Value = EventRecord;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event record that begins with seq, at_ms and tenant")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EventRecord, A::Error> {
        next_key_is(&mut map, HEAD_KEYS[0])?;
        let seq = map.next_value::<u64>()?;
        next_key_is(&mut map, HEAD_KEYS[1])?;
        let at_ms = map.next_value::<u64>()?;
        next_key_is(&mut map, HEAD_KEYS[2])?;
        let tenant = map.next_value::<String>()?;
        let kind = KindRecord::deserialize(de::value::MapAccessDeserializer::new(Rest(map)))?;
        Ok(EventRecord {
            seq,
            at_ms,
            tenant,
            kind,
        })
    }
}

/// Reads the next key, refusing any but `expected`.
fn next_key_is<'de, A: MapAccess<'de>>(map: &mut A, expected: &str) -> Result<(), A::Error> {
    match map.next_key::<&'de str>()? {
        Some(key) if key == expected => Ok(()),
        _ => Err(de::Error::custom("not in the written order")),
    }
}

/// The record's entries after its head, for the kind; a head key met again is refused (the
/// derived reading refuses it as a duplicate field).
struct Rest<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Rest<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.0.next_key::<&'de str>()? else {
            return Ok(None);
        };
        if HEAD_KEYS.contains(&key) {
            return Err(de::Error::custom("a head key repeated"));
        }
        seed.deserialize(de::value::BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of each shape the log holds, read both ways.
    fn both_ways(
        json: &str,
    ) -> (
        serde_json::Result<EventRecord>,
        serde_json::Result<EventRecord>,
    ) {
        (
            in_written_order(json.as_bytes()),
            serde_json::from_slice(json.as_bytes()),
        )
    }

    #[test]
    fn a_record_in_the_written_order_reads_as_the_derived_reading_reads_it() {
        for json in [
            r#"{"seq":1,"at_ms":5,"tenant":"t","type":"tenant_created","operator_token_hash":"ab"}"#,
            r#"{"seq":7,"at_ms":9,"tenant":"t","type":"agent_resumed","agent":3}"#,
            r#"{"seq":8,"at_ms":9,"tenant":"t","type":"timer_fired","agent":3,"due_at_ms":1,"missed_slots":0,"next_fire_at_ms":2}"#,
            // Fields of the kind in another order, and one no build knows: both readings agree.
            r#"{"seq":9,"at_ms":9,"tenant":"t","agent":3,"type":"agent_terminated","later":[1,{"a":"\"q\""}]}"#,
        ] {
            let (quick, derived) = both_ways(json);
            assert_eq!(quick.unwrap(), derived.unwrap(), "{json}");
        }
    }

    #[test]
    fn any_other_shape_is_left_to_the_derived_reading() {
        for json in [
            // Another order of the head.
            r#"{"at_ms":5,"seq":1,"tenant":"t","type":"agent_resumed","agent":3}"#,
            r#"{"type":"agent_resumed","seq":1,"at_ms":5,"tenant":"t","agent":3}"#,
            // A head key again: a duplicate field for the derived reading.
            r#"{"seq":1,"at_ms":5,"tenant":"t","type":"agent_resumed","agent":3,"seq":2}"#,
            // A head value of the wrong type, an unknown kind, trailing bytes, not an object.
            r#"{"seq":"1","at_ms":5,"tenant":"t","type":"agent_resumed","agent":3}"#,
            r#"{"seq":1,"at_ms":5,"tenant":"t","type":"no_such_event"}"#,
            r#"{"seq":1,"at_ms":5,"tenant":"t","type":"agent_resumed","agent":3} x"#,
            r#"[1,5,"t"]"#,
        ] {
            assert!(in_written_order(json.as_bytes()).is_err(), "{json}");
            let derived: serde_json::Result<EventRecord> = serde_json::from_slice(json.as_bytes());
            match (event_record(json.as_bytes()), derived) {
                (Ok(read), Ok(derived)) => assert_eq!(read, derived, "{json}"),
                (Err(read), Err(derived)) => {
                    assert_eq!(read.to_string(), derived.to_string(), "{json}")
                }
                (read, derived) => panic!("{json}: {read:?} against {derived:?}"),
            }
        }
    }
}
