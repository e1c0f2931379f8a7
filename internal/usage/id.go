package usage

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"
)

// IDPrefix starts every ledger record id made by NewID.
const IDPrefix = "req_"

// idAlphabet is Crockford's base32 in lower case: in ASCII order, so ids
// sort by their time prefix, and free of look-alike letters.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// NewID returns a new ledger record id: "req_", 10 characters of the
// current Unix time in milliseconds, then 26 characters holding 128 random
// bits from crypto/rand. The random part makes an id unguessable (no key
// can claim another's next id); the time prefix keeps new rows at the end
// of the primary-key index, as the old counter ids did.
func NewID() string {
	var b [len(IDPrefix) + 36]byte
	copy(b[:], IDPrefix)
	out := b[len(IDPrefix):]
	ms := uint64(time.Now().UnixMilli())
	for i := 9; i >= 0; i-- { // 50 bits, big-endian: the first 2 are zero
		out[i] = idAlphabet[ms&31]
		ms >>= 5
	}
	var r [16]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand panics first)
	hi, lo := binary.BigEndian.Uint64(r[:8]), binary.BigEndian.Uint64(r[8:])
	// 26 characters of 5 bits = 130 bits: the 128 random ones and 2 zeros.
	for i := 35; i >= 10; i-- {
		out[i] = idAlphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(b[:])
}

// IsNewID reports whether id has the shape NewID gives.
func IsNewID(id string) bool {
	if len(id) != len(IDPrefix)+36 || !strings.HasPrefix(id, IDPrefix) {
		return false
	}
	for i := len(IDPrefix); i < len(id); i++ {
		if strings.IndexByte(idAlphabet, id[i]) < 0 {
			return false
		}
	}
	return true
}

// LegacyClientRequestID returns the client request id of a record written
// before records had their own: the id itself, unless it has the shape the
// gateway used to make up when the client sent none ("req_", 8 hex digits,
// "_", a base-36 counter), for which the client sent nothing. The
// database migrations apply the same rule to existing rows.
func LegacyClientRequestID(id string) string {
	if looksOldServerID(id) {
		return ""
	}
	return id
}

func looksOldServerID(id string) bool {
	const hexLen = 8
	if len(id) <= len(IDPrefix)+hexLen+1 || !strings.HasPrefix(id, IDPrefix) || id[len(IDPrefix)+hexLen] != '_' {
		return false
	}
	for _, c := range []byte(id[len(IDPrefix) : len(IDPrefix)+hexLen]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	for _, c := range []byte(id[len(IDPrefix)+hexLen+1:]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}
