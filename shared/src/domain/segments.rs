//! How many SMS parts a text costs. One SMS carries 140 bytes: 160 GSM-7 septets or 70 UCS-2
//! code units; a concatenated message loses room to its header, 153 septets / 67 units per part.
//! Characters of the GSM-7 extension table (`{}[]~|€^\` and form feed) cost two septets, and an
//! escape pair or a UTF-16 surrogate pair is never split across parts.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    Gsm7,
    Ucs2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentCount {
    pub encoding: Encoding,
    /// Septets (GSM-7) or UTF-16 code units (UCS-2).
    pub units: usize,
    pub segments: u32,
}

const GSM7_BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞ\u{1b}ÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
const GSM7_EXTENSION: &str = "\u{0c}^{}\\[~]|€";

fn gsm7_cost(c: char) -> Option<usize> {
    if GSM7_BASIC.contains(c) {
        Some(1)
    } else if GSM7_EXTENSION.contains(c) {
        Some(2)
    } else {
        None
    }
}

/// Packs item costs into parts of `multi` units, unless the whole fits in one part of `single`.
fn pack(costs: &[usize], single: usize, multi: usize) -> (usize, u32) {
    let total: usize = costs.iter().sum();
    if total <= single {
        return (total, 1);
    }
    let mut parts = 1u32;
    let mut used = 0usize;
    for &c in costs {
        if used + c > multi {
            parts += 1;
            used = 0;
        }
        used += c;
    }
    (total, parts)
}

pub fn measure(text: &str) -> SegmentCount {
    let gsm: Option<Vec<usize>> = text.chars().map(gsm7_cost).collect();
    match gsm {
        Some(costs) => {
            let (units, segments) = pack(&costs, 160, 153);
            SegmentCount { encoding: Encoding::Gsm7, units, segments }
        }
        None => {
            let costs: Vec<usize> = text.chars().map(char::len_utf16).collect();
            let (units, segments) = pack(&costs, 70, 67);
            SegmentCount { encoding: Encoding::Ucs2, units, segments }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ascii_up_to_160_characters_is_one_gsm7_part() {
        let m = measure(&"a".repeat(160));
        assert_eq!((m.encoding, m.units, m.segments), (Encoding::Gsm7, 160, 1));
        assert_eq!(measure(&"a".repeat(161)).segments, 2);
        assert_eq!(measure(&"a".repeat(306)).segments, 2);
        assert_eq!(measure(&"a".repeat(307)).segments, 3);
    }

    #[test]
    fn extension_characters_count_double() {
        let m = measure(&"{".repeat(80));
        assert_eq!((m.encoding, m.units, m.segments), (Encoding::Gsm7, 160, 1));
        assert_eq!(measure(&format!("{}a", "€".repeat(80))).segments, 2);
    }

    #[test]
    fn an_escape_pair_is_never_split_across_parts() {
        // 152 plain septets then an escape pair: the pair moves whole into part two.
        let text = format!("{}{}{}", "a".repeat(152), "[", "a".repeat(10));
        let m = measure(&text);
        assert_eq!(m.units, 164);
        assert_eq!(m.segments, 2);
        let text = format!("{}{}", "a".repeat(152), "[".repeat(77));
        assert_eq!(measure(&text).segments, 3);
    }

    #[test]
    fn any_character_outside_gsm7_switches_the_whole_text_to_ucs2() {
        let m = measure(&format!("{}ł", "a".repeat(69)));
        assert_eq!((m.encoding, m.units, m.segments), (Encoding::Ucs2, 70, 1));
        assert_eq!(measure(&format!("{}ł", "a".repeat(70))).segments, 2);
        assert_eq!(measure(&"ł".repeat(134)).segments, 2);
        assert_eq!(measure(&"ł".repeat(135)).segments, 3);
    }

    #[test]
    fn emoji_take_two_ucs2_units_and_stay_whole() {
        let m = measure(&"🚨".repeat(35));
        assert_eq!((m.encoding, m.units, m.segments), (Encoding::Ucs2, 70, 1));
        // 33 emoji = 66 units fill a part to 66 of 67: the 34th must move whole.
        assert_eq!(measure(&"🚨".repeat(36)).segments, 2);
        assert_eq!(measure(&"🚨".repeat(67)).segments, 3);
    }
}
