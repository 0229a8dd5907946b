//! Text the operator does not control (a plugin's answer or error, an error quoting one) cut
//! before it is written to the API server: a plugin may hand back up to `limits.maxOutputKiB`
//! (1 MiB by default) and a trap quotes 2 KiB of its stderr, while a status is read by people
//! and an Event's note over 1024 bytes is refused by the API server, so the Event is lost.

use std::borrow::Cow;

/// Bytes kept of a text written to a status field or a condition message: 1 KiB.
pub const STATUS_TEXT_BYTES: usize = 1024;
/// Bytes the API server accepts in an Event's note (`events.k8s.io/v1`, `note` "can have at
/// most 1024 characters", counted in bytes); a longer Event is refused.
pub const EVENT_NOTE_BYTES: usize = 1024;
/// What ends a cut text (3 bytes, counted within the limit).
pub const CUT_MARK: &str = "…";

/// `text` within `max` bytes: itself when it fits, else cut at a character boundary and ended
/// with [`CUT_MARK`], `max` bytes at most in all.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max.saturating_sub(CUT_MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{CUT_MARK}", &text[..end]))
}

/// `text` within [`STATUS_TEXT_BYTES`], for a status field or a condition message.
pub fn status_text(text: &str) -> String {
    cut(text, STATUS_TEXT_BYTES).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_character_boundary_within_the_limit() {
        assert_eq!(cut("fits", 4), "fits");
        assert!(matches!(cut("fits", 4), Cow::Borrowed(_)));
        assert_eq!(cut("abcdefgh", 6), "abc…");
        // "é" is 2 bytes: the cut never splits it.
        assert_eq!(cut("éééé", 7), "éé…");
        let long = "ü".repeat(2000);
        let status = status_text(&long);
        assert!(status.len() <= STATUS_TEXT_BYTES, "{}", status.len());
        assert!(status.ends_with(CUT_MARK));
        assert!(status.len() > STATUS_TEXT_BYTES - 8, "only what must go");
    }
}
