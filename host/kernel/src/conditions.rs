//! Status conditions (`metav1.Condition`) as the API conventions want them: one per type,
//! `lastTransitionTime` moved only when the status flips, `observedGeneration` set.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Builds condition `type_` for a resource at `generation`, keeping the transition time of
/// the previous condition of the same type in `previous` when its status is unchanged. The
/// message is cut to [`STATUS_TEXT_BYTES`](crate::text::STATUS_TEXT_BYTES) (it often quotes a
/// plugin's error).
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    let value = if status { "True" } else { "False" };
    let last_transition_time = match find(previous, type_) {
        Some(p) if p.status == value => p.last_transition_time.clone(),
        _ => Time(k8s_openapi::jiff::Timestamp::now()),
    };
    Condition {
        type_: type_.into(),
        status: value.into(),
        reason: reason.into(),
        message: crate::text::status_text(&message.into()),
        observed_generation: generation,
        last_transition_time,
    }
}

/// Inserts or replaces `new` (by type) in `conditions`, keeping the order of the others.
pub fn set(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(c) => *c = new,
        None => conditions.push(new),
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether `current` already says what `wanted` says (status, reason, message and generation),
/// so writing it again would change nothing but noise.
pub fn unchanged(current: Option<&Condition>, wanted: &Condition) -> bool {
    current.is_some_and(|c| {
        c.status == wanted.status
            && c.reason == wanted.reason
            && c.message == wanted.message
            && c.observed_generation == wanted.observed_generation
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut old = condition(&[], "Ready", true, "Done", "ok", Some(1));
        old.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let prev = vec![old.clone()];
        let same = condition(&prev, "Ready", true, "Done", "ok", Some(1));
        assert_eq!(same.last_transition_time, old.last_transition_time);
        assert!(unchanged(Some(&old), &same));
        let flipped = condition(&prev, "Ready", false, "Failed", "boom", Some(2));
        assert_ne!(flipped.last_transition_time, old.last_transition_time);
        assert!(!unchanged(Some(&old), &flipped));
        let mut list = prev;
        set(&mut list, flipped.clone());
        set(&mut list, condition(&[], "Other", true, "X", "", Some(2)));
        assert_eq!(list.len(), 2);
        assert_eq!(find(&list, "Ready"), Some(&flipped));
    }

    #[test]
    fn a_long_message_is_cut_to_a_kib() {
        let c = condition(&[], "Ready", false, "Failed", "x".repeat(5000), None);
        assert_eq!(c.message.len(), crate::text::STATUS_TEXT_BYTES);
        assert!(c.message.ends_with(crate::text::CUT_MARK));
    }
}
