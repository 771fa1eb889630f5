//! A published list that the snapshot shares rather than copies: the snapshot is built after
//! every step (about once per token), but its log, first-token samples and ended requests
//! change once per request at most, so each is made anew only when it changes and every
//! snapshot in between holds a pointer to the same list (the incremental part of publishing).

use serde::Serialize;
use std::sync::Arc;

/// An immutable list, oldest first; cloning it copies a pointer.
#[derive(Debug)]
pub struct Shared<T>(Arc<Vec<T>>);

impl<T> Shared<T> {
    pub fn as_slice(&self) -> &[T] {
        &self.0
    }

    /// The same list (one allocation), not merely equal contents.
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self(Arc::new(Vec::new()))
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> From<Vec<T>> for Shared<T> {
    fn from(items: Vec<T>) -> Self {
        Self(Arc::new(items))
    }
}

impl<T> FromIterator<T> for Shared<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        Self(Arc::new(items.into_iter().collect()))
    }
}

impl<'a, T> IntoIterator for &'a Shared<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    /// The same list is equal without a look at its items (the usual case between two
    /// snapshots).
    fn eq(&self, other: &Self) -> bool {
        self.same(other) || self.0 == other.0
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A bounded list kept by the actor and published as a [`Shared`]: a change makes a new list
/// (the oldest item left out past `max`); publishing in between copies a pointer.
#[derive(Debug)]
pub struct Bounded<T> {
    published: Shared<T>,
    max: usize,
}

impl<T: Clone> Bounded<T> {
    pub fn new(max: usize) -> Self {
        Self {
            published: Shared::default(),
            max,
        }
    }

    pub fn push(&mut self, item: T) {
        let old = self.published.as_slice();
        let dropped = (old.len() + 1).saturating_sub(self.max);
        let mut items = Vec::with_capacity(old.len() + 1 - dropped);
        items.extend(old.iter().skip(dropped).cloned());
        items.push(item);
        self.published = Shared::from(items);
    }

    /// The items, oldest first.
    pub fn shared(&self) -> Shared<T> {
        self.published.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_list_keeps_the_newest_items_oldest_first() {
        let mut list = Bounded::new(3);
        for i in 0..5 {
            list.push(i);
        }
        assert_eq!(list.shared().as_slice(), &[2, 3, 4]);
    }

    #[test]
    fn a_published_list_is_shared_until_it_changes() {
        let mut list = Bounded::new(10);
        list.push(1);
        let (a, b) = (list.shared(), list.shared());
        assert!(a.same(&b), "two snapshots without a change share one list");
        list.push(2);
        assert!(!a.same(&list.shared()));
        assert_eq!(a, Shared::from(vec![1]), "equal contents are equal");
    }
}
