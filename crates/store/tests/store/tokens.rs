//! API tokens and browser sessions: look-up, expiry, revocation.

use crate::common::t;
use gpuhub_core::user::Role;
use gpuhub_store::{Store, StoreError, TokenKind, TokenRecord};

both!(expiry, kinds_and_disabled_users, revocation, refusals, revoke_by_id_and_all_but_one);

async fn expiry(s: Store) {
    let u = s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    let hour = 3_600_000;
    s.insert_token(u.id, "session", TokenKind::Session, t(0), Some(t(hour))).await.unwrap();
    s.insert_token(u.id, "forever", TokenKind::Api, t(0), None).await.unwrap();

    assert_eq!(s.token_user("session", t(0)).await.unwrap(), Some((u.clone(), TokenKind::Session)));
    assert_eq!(s.token_user("session", t(hour - 1)).await.unwrap(), Some((u.clone(), TokenKind::Session)));
    // expires_at is exclusive
    assert_eq!(s.token_user("session", t(hour)).await.unwrap(), None);
    assert_eq!(s.token_user("session", t(10 * hour)).await.unwrap(), None);
    assert_eq!(s.token_user("forever", t(1_000_000 * hour)).await.unwrap(), Some((u.clone(), TokenKind::Api)));
    assert_eq!(s.token_user("unknown", t(0)).await.unwrap(), None);

    // the clean-up removes exactly the expired ones
    assert_eq!(s.delete_expired_tokens(t(hour - 1)).await.unwrap(), 0);
    assert_eq!(s.delete_expired_tokens(t(hour)).await.unwrap(), 1);
    let left = s.list_user_tokens(u.id).await.unwrap();
    assert_eq!(
        left,
        vec![TokenRecord { hash: "forever".into(), kind: TokenKind::Api, created_at: t(0), expires_at: None }]
    );
}

async fn kinds_and_disabled_users(s: Store) {
    let u = s.create_user("alice", "h", Role::Admin, t(0)).await.unwrap();
    s.insert_token(u.id, "a", TokenKind::Api, t(1), Some(t(500))).await.unwrap();
    s.insert_token(u.id, "b", TokenKind::Session, t(2), None).await.unwrap();
    assert_eq!(
        s.list_user_tokens(u.id).await.unwrap(),
        vec![
            TokenRecord { hash: "a".into(), kind: TokenKind::Api, created_at: t(1), expires_at: Some(t(500)) },
            TokenRecord { hash: "b".into(), kind: TokenKind::Session, created_at: t(2), expires_at: None },
        ]
    );
    // a disabled user's token still resolves, flagged, so the caller can say why it refuses
    s.set_disabled("alice", true).await.unwrap();
    let (got, kind) = s.token_user("b", t(3)).await.unwrap().unwrap();
    assert!(got.disabled && got.is_admin());
    assert_eq!(kind, TokenKind::Session);
}

async fn revocation(s: Store) {
    let alice = s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    let bob = s.create_user("bob", "h", Role::User, t(0)).await.unwrap();
    for (user, hash) in [(&alice, "a1"), (&alice, "a2"), (&bob, "b1")] {
        s.insert_token(user.id, hash, TokenKind::Api, t(0), None).await.unwrap();
    }
    s.delete_token("a1").await.unwrap();
    assert_eq!(s.token_user("a1", t(1)).await.unwrap(), None);
    assert!(s.token_user("a2", t(1)).await.unwrap().is_some());
    // revoking twice (or an unknown hash) is harmless
    s.delete_token("a1").await.unwrap();

    s.delete_user_tokens(alice.id).await.unwrap();
    assert_eq!(s.token_user("a2", t(1)).await.unwrap(), None);
    assert_eq!(s.token_user("b1", t(1)).await.unwrap(), Some((bob, TokenKind::Api)));
    s.delete_user_tokens(alice.id).await.unwrap();
}

async fn refusals(s: Store) {
    let u = s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    s.insert_token(u.id, "same", TokenKind::Api, t(0), None).await.unwrap();
    let e = s.insert_token(u.id, "same", TokenKind::Session, t(0), None).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e:?}");
    let e = s.insert_token(u.id + 1000, "other", TokenKind::Api, t(0), None).await.unwrap_err();
    assert!(matches!(e, StoreError::NotFound { what: "user", .. }), "{e:?}");
    assert_eq!(s.token_user("same", t(0)).await.unwrap().unwrap().1, TokenKind::Api);
}

async fn revoke_by_id_and_all_but_one(s: Store) {
    let a = s.create_user("alice", "h", Role::User, t(0)).await.unwrap();
    let b = s.create_user("bob", "h", Role::User, t(0)).await.unwrap();
    let hash = |c: char| std::iter::repeat_n(c, 64).collect::<String>();
    for (u, c) in [(&a, 'a'), (&a, 'b'), (&a, 'c'), (&b, 'd')] {
        s.insert_token(u.id, &hash(c), TokenKind::Api, t(0), None).await.unwrap();
    }
    // by id: only the owner's own, only a long enough hex prefix, never a LIKE pattern
    assert!(matches!(s.delete_user_token_by_id(a.id, &hash('d')[..16]).await, Err(StoreError::NotFound { .. })));
    assert!(matches!(s.delete_user_token_by_id(a.id, "aaaa").await, Err(StoreError::NotFound { .. })));
    assert!(matches!(s.delete_user_token_by_id(a.id, "%%%%%%%%%%%%%%%%").await, Err(StoreError::NotFound { .. })));
    s.delete_user_token_by_id(a.id, &hash('a')[..16]).await.unwrap();
    assert_eq!(s.token_user(&hash('a'), t(1)).await.unwrap(), None);
    // all but the caller's own
    assert_eq!(s.delete_user_tokens_except(a.id, Some(&hash('c'))).await.unwrap(), 1);
    assert!(s.token_user(&hash('b'), t(1)).await.unwrap().is_none());
    assert!(s.token_user(&hash('c'), t(1)).await.unwrap().is_some());
    assert!(s.token_user(&hash('d'), t(1)).await.unwrap().is_some(), "another user's token stays");
    assert_eq!(s.delete_user_tokens_except(a.id, None).await.unwrap(), 1);
}
