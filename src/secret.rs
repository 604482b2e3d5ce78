//! Secrets: making them and comparing them, written once.
//!
//! [`random_hex`] makes a secret (a supervisor link's, a bearer token);
//! [`constant_time_eq`] checks one against what it must be, so how long a
//! check takes tells a caller nothing about how much of a guess was right.

/// A fresh secret: 256 bits from the kernel's secure generator
/// (`getrandom`), as 64 hex digits.
pub fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        // Blocks only until the generator is seeded at boot; reads of up
        // to 256 bytes are never cut short, but a signal may interrupt.
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("the kernel's random generator failed: {e}"),
        }
    }
    hex::encode(bytes)
}

/// The sha256 of `bytes`: how a credential is kept (never the credential
/// itself) and looked up.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// Whether `a` and `b` are equal, comparing every byte whatever the first
/// difference (only the length is told by the time taken).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_hex_is_fresh_64_hex_digits() {
        let (a, b) = (random_hex(), random_hex());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        let a = random_hex();
        assert!(constant_time_eq(a.as_bytes(), a.clone().as_bytes()));
        assert!(constant_time_eq(b"", b""));
        assert!(!constant_time_eq(a.as_bytes(), random_hex().as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), &a.as_bytes()[..63]));
        assert!(!constant_time_eq(b"Bearer x", b"Bearer y"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn secrets_are_fresh_and_compared_whole() {
        let (a, b) = (random_hex(), random_hex());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(constant_time_eq(a.as_bytes(), a.clone().as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), b.as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), &a.as_bytes()[..63]));
    }
}
