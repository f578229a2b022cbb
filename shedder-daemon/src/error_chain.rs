//! An error with its causes, for messages: typed errors keep their causes
//! as `source()`s, and a log line or an answer should still show them all.

use std::{error::Error, fmt};

/// Displays an error and each of its sources, joined by `": "`. A source
/// whose text the one before it already holds is left out: some errors
/// (the Redis client's, for one) print their source in their own text.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last = self.0.to_string();
        write!(f, "{last}")?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !last.contains(&text) {
                write!(f, ": {text}")?;
            }
            last = text;
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("map shedder_classes")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn shows_every_cause_in_order() {
        let e = Outer(std::io::Error::other("no space left"));
        assert_eq!(ErrorChain(&e).to_string(), "map shedder_classes: no space left");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("refused: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn a_cause_already_in_the_text_is_not_repeated() {
        let e = Outer(std::io::Error::other(Repeats(std::io::Error::other("wrong password"))));
        assert_eq!(ErrorChain(&e).to_string(), "map shedder_classes: refused: wrong password");
    }
}
