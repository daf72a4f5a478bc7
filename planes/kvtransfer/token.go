package kvtransfer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tandemllm/tandem/engine"
)

// Transfer tokens. A receiving node accepts blocks only with a token its
// own key signed for that exact transfer: the destination, the sender, the
// first block and every token of the prompt the blocks belong to. The
// frontend that assigned the prefill worker mints it (with the key it
// fetched from the decode worker over the authenticated request plane)
// and hands it to the prefill worker with the leg. So a peer can push
// blocks only for a prompt a frontend gave it, only to the worker it was
// told, and only once: the token's nonce is remembered until it expires.
// Since blocks are imported under the prefix hashes of the tokens the
// token covers, no block can land under any other prompt's prefix.
//
//	token: nonce[16] | expires u64 (unix ns) | HMAC-SHA256[32]
const (
	tokenLen   = 16 + 8 + sha256.Size
	tokenLabel = "tandem-kv-transfer/1"
	// TokenTTL is how long a token stays valid: beyond any prefill leg
	// (--disagg-leg-timeout, 60 s by default) plus clock skew between
	// the frontend and the decode worker.
	TokenTTL = 5 * time.Minute
	// KeyLen is the length of a node's token key.
	KeyLen = 32
	// maxSeen bounds the nonces remembered against replay; past it new
	// transfers are refused (fail closed) until old tokens expire.
	maxSeen = 1 << 20
)

// MintToken signs a transfer token with key (the destination node's) for
// sending blocks [from, len(tokens)/block size) of tokens from sender to
// dst.
func MintToken(key []byte, dst, sender string, tokens []engine.Token, from int) ([]byte, error) {
	if len(key) != KeyLen {
		return nil, fmt.Errorf("kvtransfer: token key of %d bytes, want %d", len(key), KeyLen)
	}
	if from < 0 {
		return nil, fmt.Errorf("kvtransfer: first block %d", from)
	}
	t := make([]byte, 24, tokenLen)
	if _, err := rand.Read(t[:16]); err != nil {
		return nil, fmt.Errorf("kvtransfer: token nonce: %w", err)
	}
	binary.LittleEndian.PutUint64(t[16:], uint64(time.Now().Add(TokenTTL).UnixNano()))
	return append(t, tokenMAC(key, dst, sender, from, t[:24], tokens)...), nil
}

func tokenMAC(key []byte, dst, sender string, from int, head []byte, tokens []engine.Token) []byte {
	m := hmac.New(sha256.New, key)
	var b []byte
	b = append(b, tokenLabel...)
	b = appendString(b, dst)
	b = appendString(b, sender)
	b = binary.LittleEndian.AppendUint32(b, uint32(from))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(tokens)))
	b = append(b, head...)
	m.Write(b)
	var tb [4 * 256]byte
	for len(tokens) > 0 {
		n := min(len(tokens), 256)
		for i, t := range tokens[:n] {
			binary.LittleEndian.PutUint32(tb[4*i:], uint32(t))
		}
		m.Write(tb[:4*n])
		tokens = tokens[n:]
	}
	return m.Sum(nil)
}

// Errors of a refused token (wrapped in an *Error with CodeRejected).
var (
	ErrNoToken      = errors.New("no transfer token")
	ErrBadToken     = errors.New("transfer token does not match this transfer")
	ErrTokenExpired = errors.New("transfer token expired")
	ErrTokenReused  = errors.New("transfer token already used")
)

// tokens is a receiving node's key and the nonces it has accepted.
type tokens struct {
	key []byte

	mu    sync.Mutex
	seen  map[[16]byte]int64 // nonce → expiry (unix ns)
	added int
}

func newTokens() (*tokens, error) {
	key := make([]byte, KeyLen)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("kvtransfer: token key: %w", err)
	}
	return &tokens{key: key, seen: map[[16]byte]int64{}}, nil
}

// check verifies h's token for a transfer to dst and consumes it.
func (ts *tokens) check(dst string, h *begin, now time.Time) error {
	t := h.Token
	if len(t) == 0 {
		return ErrNoToken
	}
	if len(t) != tokenLen {
		return fmt.Errorf("%w: %d bytes", ErrBadToken, len(t))
	}
	mac := tokenMAC(ts.key, dst, h.Sender, h.From, t[:24], h.Tokens)
	if !hmac.Equal(mac, t[24:]) {
		return ErrBadToken
	}
	exp := int64(binary.LittleEndian.Uint64(t[16:24]))
	if now.UnixNano() > exp {
		return ErrTokenExpired
	}
	var nonce [16]byte
	copy(nonce[:], t[:16])
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, dup := ts.seen[nonce]; dup {
		return ErrTokenReused
	}
	if ts.added++; ts.added%4096 == 0 || len(ts.seen) >= maxSeen {
		for k, e := range ts.seen {
			if e < now.UnixNano() {
				delete(ts.seen, k)
			}
		}
		if len(ts.seen) >= maxSeen {
			return fmt.Errorf("%w: %d unexpired tokens already accepted", ErrBadToken, len(ts.seen))
		}
	}
	ts.seen[nonce] = exp
	return nil
}
