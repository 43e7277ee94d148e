//! Signatures of dead letters (`errors.dlq.signing_key`): anyone who may write to a
//! dead-letter topic could otherwise forge a letter with sluice's context headers and have
//! a redrive write it. With keys set, the dead-letter producer puts in header
//! `sluice.signature` the lowercase hex HMAC-SHA256, under the first key, of the letter's
//! fields in this order, each as a 4-byte big-endian length and then its bytes:
//!
//! 1. the connector's name (`sluice.connector`), UTF-8;
//! 2. the source topic (`sluice.source.topic`), UTF-8;
//! 3. the source partition, in decimal ASCII (`sluice.source.partition`);
//! 4. the source offset, in decimal ASCII (`sluice.source.offset`);
//! 5. the record's key;
//! 6. the record's value (absent when `sluice.value.omitted` left it out);
//! 7. the number of the record's own headers, as a 4-byte big-endian count, then each in
//!    order as its name (UTF-8) and its value; a header of the record named like one of
//!    sluice's context headers (`sluice.source.topic`, …, `sluice.signature`) is left out,
//!    as a redrive cannot tell it from sluice's;
//! 8. the record's timestamp, ms since the epoch in decimal ASCII
//!    (`sluice.source.timestamp`).
//!
//! An absent key, value, header value or timestamp is the length `0xFFFFFFFF` with no
//! bytes, so it differs from an empty one (length 0). A redrive accepts a signature made
//! with any of the keys (rotation) and compares in constant time.

use hmac::{KeyInit, Mac};

use super::dead_letter_headers as header;
use crate::config::SigningKeys;
use crate::record::Record;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The length that stands for an absent field.
const ABSENT: u32 = u32::MAX;

/// What a signature covers: a dead letter's connector and record.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub connector: &'a str,
    /// The record as it arrived, with its own headers only (none of sluice's context), and
    /// the value as the letter carries it (`None` when left out for its size).
    pub record: &'a Record,
    pub value: Option<&'a [u8]>,
}

impl Signed<'_> {
    /// The bytes the HMAC is computed over (the layout in the module's documentation).
    fn message(&self) -> Vec<u8> {
        let record = self.record;
        let mut out = Vec::with_capacity(
            64 + record.key.as_ref().map_or(0, Vec::len) + self.value.map_or(0, <[u8]>::len),
        );
        field(&mut out, Some(self.connector.as_bytes()));
        field(&mut out, Some(record.topic.as_bytes()));
        field(&mut out, Some(record.partition.to_string().as_bytes()));
        field(&mut out, Some(record.offset.to_string().as_bytes()));
        field(&mut out, record.key.as_deref());
        field(&mut out, self.value);
        let own = || {
            record
                .headers
                .iter()
                .filter(|(name, _)| !header::ALL.contains(&name.as_str()))
        };
        out.extend_from_slice(&length(own().count()).to_be_bytes());
        for (name, value) in own() {
            field(&mut out, Some(name.as_bytes()));
            field(&mut out, value.as_deref());
        }
        let timestamp = record.timestamp.map(|t| t.to_string());
        field(&mut out, timestamp.as_deref().map(str::as_bytes));
        out
    }
}

/// A field: its length (or [`ABSENT`]) and its bytes.
fn field(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => {
            out.extend_from_slice(&length(bytes.len()).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        None => out.extend_from_slice(&ABSENT.to_be_bytes()),
    }
}

/// A length as the layout writes it: a Kafka message is far below 4 GiB, so it fits.
fn length(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(ABSENT - 1)
}

/// Signs and verifies dead letters with the keys of `errors.dlq.signing_key`.
#[derive(Clone)]
pub struct Signer {
    /// The keys' bytes, the signing one first.
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// How a dead letter's signature checks out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Made with one of the keys over these very fields.
    Valid,
    /// The letter has no `sluice.signature` header.
    Unsigned,
    /// A signature that none of the keys made over these fields (tampered with, forged, or
    /// made with a key no longer in the list).
    Bad,
}

impl Signer {
    /// A signer for `keys`; `None` when there are none.
    pub fn new(keys: &SigningKeys) -> Option<Self> {
        if keys.is_empty() {
            return None;
        }
        Some(Self {
            keys: keys
                .keys()
                .iter()
                .map(|k| k.expose().as_bytes().to_vec())
                .collect(),
        })
    }

    fn mac(key: &[u8]) -> HmacSha256 {
        // HMAC takes a key of any length.
        <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length")
    }

    /// The signature of `signed` under the first key, in lowercase hex.
    pub fn sign(&self, signed: &Signed) -> String {
        let mut mac = Self::mac(&self.keys[0]);
        mac.update(&signed.message());
        hex(&mac.finalize().into_bytes())
    }

    /// Whether `signature` (the header's value, hex) was made by one of the keys over
    /// `signed`.
    pub fn verify(&self, signed: &Signed, signature: Option<&[u8]>) -> Verdict {
        let Some(signature) = signature else {
            return Verdict::Unsigned;
        };
        let Some(bytes) = unhex(signature) else {
            return Verdict::Bad;
        };
        let message = signed.message();
        // Every key is tried, so the time taken says nothing about which one matched.
        let mut valid = false;
        for key in &self.keys {
            let mut mac = Self::mac(key);
            mac.update(&message);
            valid |= mac.verify_slice(&bytes).is_ok();
        }
        if valid { Verdict::Valid } else { Verdict::Bad }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
    out
}

/// Hex (either case) to bytes; `None` when it is not hex.
fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    text.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(keys: &[&str]) -> SigningKeys {
        serde_json::from_value(serde_json::json!(keys)).unwrap()
    }

    fn record() -> Record {
        let mut record = Record::from_value("words", 3, 17, b"{\"uid\":17}".to_vec());
        record.key = Some(b"17".to_vec());
        record.timestamp = Some(1_700_000_000_017);
        record.headers = vec![("trace".into(), Some(b"abc".to_vec())), ("n".into(), None)];
        record
    }

    #[test]
    fn the_layout_is_length_prefixed_in_a_fixed_order() {
        let mut record = Record::from_value("t", 1, 2, b"v".to_vec());
        record.key = None;
        record.timestamp = None;
        record.headers = vec![("h".into(), None)];
        let signed = Signed {
            connector: "c",
            record: &record,
            value: Some(b""),
        };
        let mut expected = Vec::new();
        for field in [&b"c"[..], b"t", b"1", b"2"] {
            expected.extend_from_slice(&(field.len() as u32).to_be_bytes());
            expected.extend_from_slice(field);
        }
        expected.extend_from_slice(&[0xff; 4]); // no key
        expected.extend_from_slice(&[0, 0, 0, 0]); // an empty value
        expected.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, b'h', 0xff, 0xff, 0xff, 0xff]);
        expected.extend_from_slice(&[0xff; 4]); // no timestamp
        assert_eq!(signed.message(), expected);
    }

    #[test]
    fn a_known_signature() {
        // Computed apart from this code, with Python's hmac module over the layout:
        // f(b) = pack(">I", len(b)) + b, or b"\xff" * 4 for an absent field;
        // f("c") f("t") f("1") f("2") f(None) f("v") pack(">I", 1) f("h") f("x")
        // f("1700000000000"), key "0123456789abcdef".
        let mut record = Record::from_value("t", 1, 2, b"v".to_vec());
        record.headers = vec![("h".into(), Some(b"x".to_vec()))];
        record.timestamp = Some(1_700_000_000_000);
        let signer = Signer::new(&keys(&["0123456789abcdef"])).unwrap();
        let signed = Signed {
            connector: "c",
            record: &record,
            value: record.value.as_deref(),
        };
        let known = "65c3f49a0288e3afcaff0735c86727ee91a4a788dc71ddfe8fa1c3aa8dedc3aa";
        assert_eq!(signer.sign(&signed), known);
        assert_eq!(
            signer.verify(&signed, Some(known.as_bytes())),
            Verdict::Valid
        );
    }

    #[test]
    fn any_change_breaks_the_signature() {
        let signer = Signer::new(&keys(&["0123456789abcdef"])).unwrap();
        let original = record();
        let sign = |connector: &str, record: &Record| {
            signer.sign(&Signed {
                connector,
                record,
                value: record.value.as_deref(),
            })
        };
        let signature = sign("words", &original);
        let check = |connector: &str, record: &Record| {
            signer.verify(
                &Signed {
                    connector,
                    record,
                    value: record.value.as_deref(),
                },
                Some(signature.as_bytes()),
            )
        };
        assert_eq!(check("words", &original), Verdict::Valid);
        assert_eq!(check("other", &original), Verdict::Bad);
        let changes: Vec<fn(&mut Record)> = vec![
            |r| r.topic = "word".into(),
            |r| r.partition = 4,
            |r| r.offset = 18,
            |r| r.key = None,
            |r| r.key = Some(Vec::new()),
            |r| r.value = Some(b"{\"uid\":18}".to_vec()),
            |r| r.value = None,
            |r| drop(r.headers.pop()),
            |r| r.headers[1].1 = Some(Vec::new()),
            |r| r.headers.swap(0, 1),
            |r| r.timestamp = Some(1),
            |r| r.timestamp = None,
        ];
        for (index, change) in changes.iter().enumerate() {
            let mut changed = original.clone();
            change(&mut changed);
            assert_eq!(check("words", &changed), Verdict::Bad, "change {index}");
        }
        // Fields do not run into each other: moving a byte from one to the next is seen.
        let mut a = original.clone();
        a.key = Some(b"1".to_vec());
        a.value = Some(b"7{\"uid\":17}".to_vec());
        assert_eq!(check("words", &a), Verdict::Bad);
    }

    #[test]
    fn headers_named_like_sluices_are_left_out() {
        // A record of a topic that holds dead letters itself: its own `sluice.*` headers
        // are dropped on redrive, so the signature must not cover them either.
        let signer = Signer::new(&keys(&["0123456789abcdef"])).unwrap();
        let mut with = record();
        with.headers
            .insert(1, ("sluice.stage".into(), Some(b"map".to_vec())));
        let without = record();
        let sign = |record: &Record| {
            signer.sign(&Signed {
                connector: "words",
                record,
                value: record.value.as_deref(),
            })
        };
        assert_eq!(sign(&with), sign(&without));
    }

    #[test]
    fn rotation_verifies_with_any_key_and_signs_with_the_first() {
        let old = Signer::new(&keys(&["old-key-0123456789"])).unwrap();
        let rotated = Signer::new(&keys(&["new-key-0123456789", "old-key-0123456789"])).unwrap();
        let new_only = Signer::new(&keys(&["new-key-0123456789"])).unwrap();
        let record = record();
        let signed = Signed {
            connector: "words",
            record: &record,
            value: record.value.as_deref(),
        };
        let by_old = old.sign(&signed);
        assert_eq!(
            rotated.verify(&signed, Some(by_old.as_bytes())),
            Verdict::Valid
        );
        assert_eq!(
            new_only.verify(&signed, Some(by_old.as_bytes())),
            Verdict::Bad
        );
        let by_rotated = rotated.sign(&signed);
        assert_eq!(by_rotated, new_only.sign(&signed));
        assert_eq!(
            rotated.verify(&signed, Some(by_rotated.to_uppercase().as_bytes())),
            Verdict::Valid
        );
    }

    #[test]
    fn missing_or_malformed_signatures() {
        let signer = Signer::new(&keys(&["0123456789abcdef"])).unwrap();
        let record = record();
        let signed = Signed {
            connector: "words",
            record: &record,
            value: record.value.as_deref(),
        };
        assert_eq!(signer.verify(&signed, None), Verdict::Unsigned);
        assert_eq!(signer.verify(&signed, Some(b"")), Verdict::Bad);
        assert_eq!(signer.verify(&signed, Some(b"zz")), Verdict::Bad);
        assert_eq!(signer.verify(&signed, Some(b"abc")), Verdict::Bad);
        let good = signer.sign(&signed);
        assert_eq!(
            signer.verify(&signed, Some(&good.as_bytes()[..62])),
            Verdict::Bad
        );
        assert!(Signer::new(&SigningKeys::default()).is_none());
    }
}
