//! Where the stored offsets went while the fold was reading ([`moved_on`]): what is left
//! to read before the next comparison, or why the fold cannot catch up.

use std::collections::BTreeMap;

use super::{Range, VerifyError};

/// Where a partition's stored offset went while the fold was reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Moved {
    /// Forward: this is left to read.
    Forward(Range),
    /// A partition with no stored offset before (a new topic under `topics_regex`, a
    /// partition added): its log is read from its start.
    New {
        topic: String,
        partition: i32,
        next: i64,
    },
}

/// What changed from the stored offsets `before` to `now` (both sorted): the parts of the
/// log to read next, or why the fold cannot catch up (an offset that went back, or was
/// forgotten: an operator's reset while verifying).
pub(super) fn moved_on(
    connector: &str,
    before: &[(String, i32, i64)],
    now: &[(String, i32, i64)],
) -> Result<Vec<Moved>, VerifyError> {
    let went_back =
        |topic: &str, partition: i32, from: i64, to: Option<i64>| VerifyError::WentBack {
            connector: connector.to_string(),
            topic: topic.to_string(),
            partition,
            from,
            to,
        };
    let was: BTreeMap<(&str, i32), i64> = before
        .iter()
        .map(|(t, p, o)| ((t.as_str(), *p), *o))
        .collect();
    if let Some((topic, partition, from)) = before
        .iter()
        .find(|(t, p, _)| !now.iter().any(|(nt, np, _)| nt == t && np == p))
    {
        return Err(went_back(topic, *partition, *from, None));
    }
    now.iter()
        .filter_map(
            |(topic, partition, next)| match was.get(&(topic.as_str(), *partition)) {
                Some(&from) if *next < from => {
                    Some(Err(went_back(topic, *partition, from, Some(*next))))
                }
                Some(&from) if *next == from => None,
                Some(&from) => Some(Ok(Moved::Forward(Range {
                    topic: topic.clone(),
                    partition: *partition,
                    from,
                    to: *next,
                }))),
                None => Some(Ok(Moved::New {
                    topic: topic.clone(),
                    partition: *partition,
                    next: *next,
                })),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_that_moved_on_are_read_from_where_the_fold_stopped() {
        let at = |t: &str, p: i32, o: i64| (t.to_string(), p, o);
        let before = [at("a", 0, 10), at("a", 1, 5)];
        let now = [at("a", 0, 14), at("a", 1, 5), at("b", 0, 3)];
        assert_eq!(
            moved_on("c", &before, &now).expect("moved"),
            vec![
                Moved::Forward(Range {
                    topic: "a".into(),
                    partition: 0,
                    from: 10,
                    to: 14
                }),
                Moved::New {
                    topic: "b".into(),
                    partition: 0,
                    next: 3
                },
            ]
        );
        let back = moved_on("c", &before, &[at("a", 0, 9), at("a", 1, 5)]);
        assert!(
            matches!(
                back,
                Err(VerifyError::WentBack {
                    from: 10,
                    to: Some(9),
                    ..
                })
            ),
            "{back:?}"
        );
        let forgotten = moved_on("c", &before, &[at("a", 0, 10)]);
        assert!(
            matches!(
                forgotten,
                Err(VerifyError::WentBack {
                    partition: 1,
                    to: None,
                    ..
                })
            ),
            "{forgotten:?}"
        );
    }
}
