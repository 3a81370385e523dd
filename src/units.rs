//! Byte sizes for people: printing (`1.50 GiB`) and parsing (`5GB`, `5GiB`, `512MiB`).

pub use sgc_ir::human_bytes;

/// What a count option takes, in words, for the CLI's and Python's messages alike ("a
/// whole number of 0 or more", "a whole number from 1 to 1024").
pub fn count_takes(range: &std::ops::RangeInclusive<u64>) -> String {
    if *range.end() == u64::MAX {
        format!("a whole number of {} or more", range.start())
    } else {
        format!("a whole number from {} to {}", range.start(), range.end())
    }
}

/// Parses a size: a number with an optional unit, decimal (`kB`, `MB`, `GB`, `TB`) or
/// binary (`KiB`, `MiB`, `GiB`, `TiB`), case-insensitive; `B` or no unit means bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("invalid size {text:?}: expected e.g. 11GB, 11GiB, 512MiB or 1048576");
    let scale: u128 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "invalid size {text:?}: unknown unit {other:?} (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    // Exact decimal arithmetic (a float would round sizes above 2^53 bytes): the digits as
    // one integer, scaled, divided by 10^(digits after the point), rounded half up.
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(bad());
    }
    if scale == 1 && !frac.trim_end_matches('0').is_empty() {
        // `--budget 0.7` meant as a share would otherwise be read as one byte.
        return Err(format!(
            "invalid size {text:?}: a count of bytes is a whole number (e.g. 32423, or \
             31.7KiB with a unit)"
        ));
    }
    let too_large = || {
        format!(
            "invalid size {text:?}: too large (at most {} bytes)",
            u64::MAX
        )
    };
    let digits: String = int.chars().chain(frac.chars()).collect();
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(too_large());
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad())?
    };
    let div = 10u128
        .checked_pow(frac.len() as u32)
        .ok_or_else(too_large)?;
    let scaled = mantissa.checked_mul(scale).ok_or_else(too_large)?;
    let bytes = (scaled + div / 2) / div;
    u64::try_from(bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_exact_beyond_float_precision() {
        assert_eq!(
            parse_size("16140901064495857000").unwrap(),
            16_140_901_064_495_857_000
        );
        assert_eq!(parse_size("18446744073709551615").unwrap(), u64::MAX);
        assert!(parse_size("18446744073709551616").is_err());
        assert_eq!(parse_size("1.5KiB").unwrap(), 1536);
        assert_eq!(parse_size("0.0005KB").unwrap(), 1);
        assert!(parse_size("1.2.3GB").is_err());
        assert!(parse_size(".").is_err());
        assert_eq!(parse_size("12.00").unwrap(), 12);
        for share in ["0.7", "0.7B", "1.5 b"] {
            let e = parse_size(share).unwrap_err();
            assert!(e.contains("whole number") && e.contains(share), "{e}");
        }
    }

    #[test]
    fn parses_decimal_and_binary_units() {
        assert_eq!(parse_size("5GB").unwrap(), 5_000_000_000);
        assert_eq!(parse_size("5GiB").unwrap(), 5 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5 kB").unwrap(), 1500);
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert!(parse_size("5 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("GB").is_err());
    }

    #[test]
    fn prints_binary_units() {
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(3 << 30), "3.00 GiB");
    }
}
