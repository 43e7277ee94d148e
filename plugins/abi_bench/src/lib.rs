//! ABI benchmark guest: the `word_parse` transform behind a typed and a packed ABI.
//! Built with the other plugins; used only by `transform/benches/word_parse.rs`.

#[path = "../../word_parse/src/parse.rs"]
#[allow(dead_code)]
mod parse;

pub mod codec;

wit_bindgen::generate!({
    path: "wit",
    world: "abi-bench",
});

use codec::{POutcome, PRecord};

struct Bench;

fn parse_value(value: Option<&[u8]>) -> Result<Option<Vec<u8>>, String> {
    match value {
        None => Ok(None),
        Some(v) => parse::parse_word_event(v, "*")
            .map(|e| Some(e.to_json().into_bytes()))
            .map_err(|e| e.0),
    }
}

impl Guest for Bench {
    fn process_typed(batch: Vec<Rec>) -> Vec<Outcome> {
        batch
            .into_iter()
            .map(|r| match parse_value(r.value.as_deref()) {
                Ok(None) => Outcome::Records(vec![]),
                Ok(Some(v)) => Outcome::Records(vec![Rec {
                    value: Some(v),
                    ..r
                }]),
                Err(e) => Outcome::Error(e),
            })
            .collect()
    }

    fn process_packed(batch: Vec<u8>) -> Vec<u8> {
        let records = match codec::decode_batch(&batch) {
            Ok(r) => r,
            Err(e) => return codec::encode_outcomes(&[POutcome::Error(e)]),
        };
        let outcomes: Vec<POutcome> = records
            .into_iter()
            .map(|r| match parse_value(r.value.as_deref()) {
                Ok(None) => POutcome::Records(vec![]),
                Ok(Some(v)) => POutcome::Records(vec![PRecord {
                    value: Some(v),
                    ..r
                }]),
                Err(e) => POutcome::Error(e),
            })
            .collect();
        codec::encode_outcomes(&outcomes)
    }
}

export!(Bench);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_round_trip() {
        let rec = PRecord {
            topic: "t".into(),
            partition: 3,
            offset: 9,
            timestamp: Some(5),
            key: None,
            value: Some(b"#1*a@2".to_vec()),
            headers: vec![("h".into(), None)],
        };
        let out = Bench::process_packed(codec::encode_batch(std::slice::from_ref(&rec)));
        let decoded = codec::decode_outcomes(&out).unwrap();
        let expected = PRecord {
            value: Some(br#"{"uid":1,"word":"a","produced_at":2}"#.to_vec()),
            ..rec
        };
        assert_eq!(decoded, vec![POutcome::Records(vec![expected])]);
        assert!(codec::decode_batch(&[1, 0, 0, 0, 9]).is_err());
    }
}
