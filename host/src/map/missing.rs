//! What a key column that read nothing says: a pointer that matched nothing in the record
//! (`from: /orderId` where the record has `order_id`) is a mistake in the file far more
//! often than a null key, so the message says which it was and names the nearest field the
//! record has at that place.

use serde_json::Value;

use super::{Column, JsonPointer, MapError, Source, column_error};

/// The error of key column `column`, which read null from `document`.
pub(super) fn null_key(column: &Column, document: Option<&Value>) -> MapError {
    let (Source::Pointer(pointer), Some(document)) = (&column.source, document) else {
        return column_error(column, "is a key column and cannot be null");
    };
    if pointer.find(document).is_some() {
        return column_error(
            column,
            &format!(
                "is a key column and cannot be null ({} is null in the record)",
                pointer.text
            ),
        );
    }
    column_error(
        column,
        &format!(
            "is a key column and cannot be null: {}",
            unmatched(pointer, document)
        ),
    )
}

/// `/orderId matched nothing in the record; the nearest field there is /order_id (it has
/// order_id, amount)`, or what the pointer's parent is when it is not an object.
fn unmatched(pointer: &JsonPointer, document: &Value) -> String {
    let Some(tokens) = pointer.tokens.as_deref() else {
        return format!(
            "{:?} is not a JSON pointer (it starts with /)",
            pointer.text
        );
    };
    let Some((last, parents)) = tokens.split_last() else {
        return format!("{} matched nothing in the record", pointer.text);
    };
    let parent_text: String = parents.iter().map(|t| format!("/{}", escape(t))).collect();
    let parent = JsonPointer::new(&parent_text).find(document);
    let Some(Value::Object(fields)) = parent else {
        let place = if parent_text.is_empty() {
            "the record"
        } else {
            &parent_text
        };
        return format!(
            "{} matched nothing: {place} is not a JSON object",
            pointer.text
        );
    };
    let nearest = fields
        .keys()
        .min_by_key(|name| (distance(&fold(name), &fold(last)), distance(name, last)));
    let listed: Vec<&str> = fields.keys().take(8).map(String::as_str).collect();
    let more = if fields.len() > listed.len() {
        ", …"
    } else {
        ""
    };
    match nearest {
        Some(name) => format!(
            "{} matched nothing in the record; the nearest field there is {parent_text}/{} (it has {}{more})",
            pointer.text,
            escape(name),
            listed.join(", ")
        ),
        None => format!(
            "{} matched nothing: the object there has no field",
            pointer.text
        ),
    }
}

/// A name as a pointer token writes it.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Case and separators left out: `orderId`, `order_id` and `Order-ID` fold alike.
fn fold(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '_' | '-' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Levenshtein distance in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_field_is_named() {
        let document = serde_json::json!({"order_id": 1, "amount": 2, "customer": {"id": 3}});
        let text = unmatched(&JsonPointer::new("/orderId"), &document);
        assert_eq!(
            text,
            "/orderId matched nothing in the record; the nearest field there is /order_id (it has order_id, amount, customer)"
        );
        let text = unmatched(&JsonPointer::new("/customer/ID"), &document);
        assert!(
            text.contains("the nearest field there is /customer/id"),
            "{text}"
        );
        let text = unmatched(&JsonPointer::new("/amount/x"), &document);
        assert_eq!(
            text,
            "/amount/x matched nothing: /amount is not a JSON object"
        );
    }

    #[test]
    fn distances() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "ab"), 2);
        assert_eq!(fold("Order-ID"), fold("order_id"));
    }
}
