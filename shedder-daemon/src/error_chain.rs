//! An error with its causes, for messages: typed errors keep their causes
//! as `source()`s, and a log line or an answer should still show them all.

use std::{error::Error, fmt};

/// Displays an error and each of its sources, joined by `": "`.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
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
}
