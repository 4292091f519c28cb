//! Disconnect-Cause (RFC 6733 §5.4.3) and what it means for reconnecting.

use crate::dict::enums::DISCONNECT_CAUSE;

/// Why a peer closes with DPR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DisconnectCause {
    /// A scheduled reboot: the receiver MAY reconnect.
    Rebooting,
    /// Resources are constrained: the receiver SHOULD NOT reconnect.
    Busy,
    /// No messages expected: the receiver SHOULD NOT reconnect.
    DoNotWantToTalkToYou,
}

impl DisconnectCause {
    /// The Enumerated value on the wire.
    pub const fn value(self) -> i32 {
        match self {
            DisconnectCause::Rebooting => DISCONNECT_CAUSE::REBOOTING,
            DisconnectCause::Busy => DISCONNECT_CAUSE::BUSY,
            DisconnectCause::DoNotWantToTalkToYou => DISCONNECT_CAUSE::DO_NOT_WANT_TO_TALK_TO_YOU,
        }
    }

    /// Decodes a wire value; unknown values are `None`.
    pub const fn from_value(v: i32) -> Option<DisconnectCause> {
        match v {
            DISCONNECT_CAUSE::REBOOTING => Some(DisconnectCause::Rebooting),
            DISCONNECT_CAUSE::BUSY => Some(DisconnectCause::Busy),
            DISCONNECT_CAUSE::DO_NOT_WANT_TO_TALK_TO_YOU => {
                Some(DisconnectCause::DoNotWantToTalkToYou)
            }
            _ => None,
        }
    }

    /// Whether RFC 6733 §5.4.3 lets the receiver of this cause reconnect
    /// at its normal pace (only REBOOTING does).
    pub const fn allows_reconnect(self) -> bool {
        matches!(self, DisconnectCause::Rebooting)
    }
}
