//! A fleet of hosts sharing each tenant's global quota through Redis.
//!
//! Every tick, in its own task ([`runner`]), a host reports each tenant's
//! demand and admitted count and takes back its share of the tenant's quota
//! as a lease ([`exchange`], one atomic Lua script). Its shares come from
//! the leases while they last and from the configured local shares once they
//! expire ([`leases`]). Nothing on the packet path, or per connection, waits
//! on the network: the fast path only ever sees rates.
//!
//! * [`settings`]: `[fleet]` and its validation.
//! * [`exchange`]: the scripts, and the connection they run over.
//! * [`leases`]: what the host holds, its shares and its [`FleetState`].
//! * [`nudge`]: the channel on which a host owed part of this one's share
//!   asks it to report now.
//! * [`runner`]: the task that ties them together every tick.
//! * [`tenant_shares`]: the tenants' shares, from the fleet.
//!
//! The model, the script and the faults are described in docs/fleet.md.

pub mod exchange;
pub mod leases;
pub mod nudge;
pub mod runner;
pub mod settings;
pub mod tenant_shares;

pub use exchange::TenantUsage;
pub use leases::{FleetState, Shares};
pub use runner::{FleetView, Usage, run};
pub use settings::{FleetSettings, FleetSpec};
pub use tenant_shares::FleetShares;
