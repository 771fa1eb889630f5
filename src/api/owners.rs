//! Which API key sent each live request, so a key without `admin` can cancel or
//! re-prioritise its own requests and no one else's. An entry lives as long as its response
//! (the [`Owned`] guard removes it), so the map holds only live requests.

use crate::ids::RequestId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Request id → the index of the key in `api_keys` that sent it.
#[derive(Debug, Clone, Default)]
pub struct Owners(Arc<Mutex<HashMap<RequestId, usize>>>);

impl Owners {
    /// Records `id` as sent by key `key` until the returned guard is dropped.
    pub fn record(&self, id: RequestId, key: usize) -> Owned {
        if let Ok(mut map) = self.0.lock() {
            map.insert(id, key);
        }
        Owned {
            owners: self.clone(),
            id,
        }
    }

    /// The key that sent `id`, while its response is open.
    pub fn of(&self, id: RequestId) -> Option<usize> {
        self.0.lock().ok()?.get(&id).copied()
    }
}

/// Removes its request from the map when the response ends.
#[derive(Debug)]
pub struct Owned {
    owners: Owners,
    id: RequestId,
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Ok(mut map) = self.owners.0.lock() {
            map.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_known_while_its_guard_lives() {
        let owners = Owners::default();
        let guard = owners.record(RequestId(7), 2);
        assert_eq!(owners.of(RequestId(7)), Some(2));
        assert_eq!(owners.of(RequestId(8)), None);
        drop(guard);
        assert_eq!(owners.of(RequestId(7)), None);
    }
}
