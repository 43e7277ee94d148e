//! `account_parse`: parses account transactions into JSON.
//!
//! Input (record value, UTF-8): `<account>:<sign><amount>@<timestamp>`, for example
//! `acct-7:+125.50@1700000000123`, where
//!
//! * `account` is 1–64 characters of `A-Z a-z 0-9 - _ .`;
//! * `sign` is `+` (credit) or `-` (debit) and is required;
//! * `amount` is a decimal with 1–18 integer digits and at most `max_scale` (default 4)
//!   fraction digits, e.g. `125`, `125.5`, `0.0001`;
//! * `timestamp` is milliseconds since the Unix epoch.
//!
//! Output (record value, JSON):
//! `{"account":"acct-7","amount":"125.50","produced_at":1700000000123}` — `amount` is
//! a signed decimal **string** (`"-3.20"` for a debit) so that no float rounding can
//! touch money; map it to a `numeric` column. The record key is set to the account id
//! when `key_by_account` is `true` (default `false`).
//!
//! Anything else is a per-record error; tombstones are dropped.

use sluice_plugin_sdk::{Config, Error, Outcome, Record, Transform};

/// One parsed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction<'a> {
    /// Account id.
    pub account: &'a str,
    /// Signed decimal text, e.g. `-3.20`.
    pub amount: String,
    /// Milliseconds since the Unix epoch.
    pub produced_at: i64,
}

/// Parses `<account>:<sign><amount>@<timestamp>`.
pub fn parse_transaction(input: &str, max_scale: usize) -> Result<Transaction<'_>, Error> {
    let bad = |what: String| {
        Error::new(format!(
            "malformed transaction (expected <account>:<+|-><amount>@<timestamp>, e.g. acct-7:+125.50@1700000000123): {what}"
        ))
    };
    let input = input.trim_end_matches(['\n', '\r']);
    let (account, rest) = input
        .split_once(':')
        .ok_or_else(|| bad("no ':' after the account".into()))?;
    if account.is_empty() || account.len() > 64 {
        return Err(bad(format!(
            "account must be 1-64 characters, got {}",
            account.len()
        )));
    }
    if let Some(c) = account
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(*c)))
    {
        return Err(bad(format!("account contains {c:?}")));
    }
    let (amount, ts) = rest
        .split_once('@')
        .ok_or_else(|| bad("no '@' before the timestamp".into()))?;
    let (negative, digits) = match amount.as_bytes().first() {
        Some(b'+') => (false, &amount[1..]),
        Some(b'-') => (true, &amount[1..]),
        _ => return Err(bad(format!("amount {amount:?} must start with '+' or '-'"))),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() || int.len() > 18 || !int.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(format!(
            "amount {amount:?}: integer part must be 1-18 digits"
        )));
    }
    if digits.contains('.') && frac.is_empty() {
        return Err(bad(format!("amount {amount:?}: no digits after '.'")));
    }
    if frac.len() > max_scale || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(format!(
            "amount {amount:?}: at most {max_scale} fraction digits"
        )));
    }
    let produced_at: i64 = ts
        .parse()
        .map_err(|e| bad(format!("timestamp {ts:?}: {e}")))?;
    let mut amount = String::with_capacity(digits.len() + 1);
    if negative {
        amount.push('-');
    }
    amount.push_str(digits);
    Ok(Transaction {
        account,
        amount,
        produced_at,
    })
}

impl Transaction<'_> {
    /// The output JSON. The account alphabet needs no escaping.
    pub fn to_json(&self) -> String {
        format!(
            r#"{{"account":"{}","amount":"{}","produced_at":{}}}"#,
            self.account, self.amount, self.produced_at
        )
    }
}

/// The plugin.
pub struct AccountParse {
    max_scale: usize,
    key_by_account: bool,
}

impl Transform for AccountParse {
    fn init(config: &Config) -> Result<Self, Error> {
        config.deny_unknown(&["max_scale", "key_by_account"])?;
        let max_scale = config.parse("max_scale")?.unwrap_or(4);
        if max_scale > 18 {
            return Err(Error::new("config `max_scale` must be at most 18"));
        }
        let key_by_account = config.parse("key_by_account")?.unwrap_or(false);
        Ok(AccountParse {
            max_scale,
            key_by_account,
        })
    }

    fn transform(&mut self, record: Record) -> Result<Outcome, Error> {
        let Some(text) = record.value_str()? else {
            return Ok(Outcome::Discard);
        };
        let tx = parse_transaction(text, self.max_scale)?;
        let (json, account) = (tx.to_json(), tx.account.to_owned());
        let mut out = record.with_value(json);
        if self.key_by_account {
            out = out.with_key(account);
        }
        Ok(Outcome::Emit(out))
    }
}

sluice_plugin_sdk::export_transform!(AccountParse);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_credit_and_debit() {
        let t = parse_transaction("acct-7:+125.50@1700000000123", 4).unwrap();
        assert_eq!(
            t.to_json(),
            r#"{"account":"acct-7","amount":"125.50","produced_at":1700000000123}"#
        );
        let t = parse_transaction("a_b.c:-3@5", 4).unwrap();
        assert_eq!(t.amount, "-3");
    }

    #[test]
    fn rejects_malformed() {
        for (input, needle) in [
            ("acct-7+1@1", "':'"),
            (":+1@1", "1-64"),
            ("ac ct:+1@1", "contains"),
            ("acct:1@1", "'+' or '-'"),
            ("acct:+@1", "integer part"),
            ("acct:+1.@1", "after '.'"),
            ("acct:+1.12345@1", "fraction"),
            ("acct:+1e5@1", "integer part"),
            ("acct:+1", "'@'"),
            ("acct:+1@x", "timestamp"),
        ] {
            let e = parse_transaction(input, 4).unwrap_err();
            assert!(e.message().contains(needle), "{input}: {e}");
        }
    }

    #[test]
    fn plugin_keys_by_account_when_asked() {
        let mut p = AccountParse::init(&Config::from_pairs([("key_by_account", "true")])).unwrap();
        let out = p.transform(Record::from_value("acct-7:-1.5@2")).unwrap();
        assert_eq!(out.records()[0].key.as_deref(), Some(&b"acct-7"[..]));
        assert!(AccountParse::init(&Config::from_pairs([("max_scale", "x")])).is_err());
        assert!(AccountParse::init(&Config::from_pairs([("nope", "x")])).is_err());
    }
}
