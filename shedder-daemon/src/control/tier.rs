//! Priority tiers: who gets the shared backend first.
//!
//! The words are the Gateway API Inference Extension's (`critical`,
//! `standard`, `sheddable`). Capacity goes to every class of a tier before
//! any class of the next one gets any; within a tier, by weight.

use serde::{Deserialize, Serialize};

/// A class's priority tier. Ordered as served: `Critical` first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Never shed while lower tiers hold capacity.
    Critical,
    #[default]
    Standard,
    /// Shed first.
    Sheddable,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Critical => "critical",
            Tier::Standard => "standard",
            Tier::Sheddable => "sheddable",
        }
    }
}
