// Byte-level alphabet of GPT-2 style BPE: every byte 0..255 is written as one
// printable rune so that tokens can be stored as text (tokenizer.json, GGUF).
// This file is only that bijection; it knows nothing about merges.

package tokenizer

import "unicode/utf8"

// byteRune[b] is the rune that stands for byte b in stored token text:
// printable Latin-1 bytes stand for themselves, the other 68 bytes are moved
// to U+0100.. in byte order (space 0x20 becomes 'Ġ' U+0120, '\n' becomes 'Ċ').
var byteRune [256]rune

// runeByte is the inverse of byteRune, indexed by rune (all runes are < 0x144).
var runeByte [0x144]int16

func init() {
	printable := func(b int) bool {
		return ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
	}
	n := 0
	for b := 0; b < 256; b++ {
		if printable(b) {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = rune(256 + n)
			n++
		}
	}
	for i := range runeByte {
		runeByte[i] = -1
	}
	for b, r := range byteRune {
		runeByte[r] = int16(b)
	}
}

// byteLevelDecode maps stored token text back to the bytes it stands for.
// ok is false when s contains a rune outside the byte-level alphabet (an added
// token such as "<|im_start|>" is plain text and never goes through here).
func byteLevelDecode(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(runeByte) || runeByte[r] < 0 {
			return nil, false
		}
		b = append(b, byte(runeByte[r]))
	}
	return b, true
}

// byteLevelEncode writes raw bytes in the byte-level alphabet.
func byteLevelEncode(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteRune[c])
	}
	return string(out)
}
