package jsonscan

// NeedsEscape reports whether AppendEscaped escapes the byte c: the
// control characters, quotes, backslashes and the HTML characters <, >
// and &, as encoding/json does.
func NeedsEscape(c byte) bool {
	return c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&'
}

// AppendEscaped appends s as the inside of a JSON string (without the
// quotes), its ASCII written as encoding/json writes it: quotes and
// backslashes escaped, \b \f \n \r \t by name, the other control
// characters and <, >, & as \u00XX. Bytes from 0x80 up pass as they are;
// encoding/json also replaces invalid UTF-8 and escapes U+2028 and
// U+2029, so a caller that must match its bytes checks for those first.
func AppendEscaped(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !NeedsEscape(c) {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	return append(b, s[start:]...)
}
