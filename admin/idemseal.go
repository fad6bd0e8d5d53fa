package admin

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/taskpull/taskd"
)

// What MySQL keeps of an Idempotency-Key is a hash of it, and the reply it keeps is
// sealed (AES-256-GCM) with a key derived from it: a reply may hold a secret (a client
// key issued, which the server otherwise keeps only a hash of), and a copy of the
// database then shows it to nobody who does not send the Idempotency-Key again. The
// status and the replayed headers (ETag, Location) are kept as they are.
//
// A key chosen to be guessed (a date, a name) protects a sealed reply as little as it
// is hard to guess: the Go client's default keys are 130 random bits.

// sealed is an IdempotencyStore that keeps hashed keys and sealed replies in st.
type sealed struct{ st IdempotencyStore }

// sealedKey is what the store keeps of key.
func sealedKey(key string) string {
	sum := sha256.Sum256([]byte("taskd idempotency key\x00" + key))
	return hex.EncodeToString(sum[:])
}

// replyCipher is the AEAD of the replies kept under actor's key.
func replyCipher(actor, key string) cipher.AEAD {
	k := sha256.Sum256([]byte("taskd idempotency reply\x00" + actor + "\x00" + key))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // a 32-byte key is always taken
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

func (s sealed) BeginIdempotent(ctx context.Context, actor, key, hash string, now time.Time, expiry, abandon time.Duration) (*taskd.IdempotentReply, bool, error) {
	prev, began, err := s.st.BeginIdempotent(ctx, actor, sealedKey(key), hash, now, expiry, abandon)
	if err == nil && prev != nil {
		err = open(prev, actor, key)
	}
	return prev, began, err
}

func (s sealed) KeptReply(ctx context.Context, actor, key string, now time.Time, expiry time.Duration) (*taskd.IdempotentReply, error) {
	prev, err := s.st.KeptReply(ctx, actor, sealedKey(key), now, expiry)
	if err == nil && prev != nil {
		err = open(prev, actor, key)
	}
	return prev, err
}

func (s sealed) FinishIdempotent(ctx context.Context, actor, key string, status int, header map[string][]string, body []byte) error {
	aead := replyCipher(actor, key)
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return s.st.FinishIdempotent(ctx, actor, sealedKey(key), status, header, aead.Seal(nonce, nonce, body, nil))
}

func (s sealed) DropIdempotent(ctx context.Context, actor, key string) error {
	return s.st.DropIdempotent(ctx, actor, sealedKey(key))
}

// open unseals a kept reply's body in place (a reply under way has none yet).
func open(r *taskd.IdempotentReply, actor, key string) error {
	if r.Status == 0 {
		return nil
	}
	aead := replyCipher(actor, key)
	if len(r.Body) < aead.NonceSize() {
		return errors.New("idempotency: a kept reply too short to be sealed")
	}
	body, err := aead.Open(nil, r.Body[:aead.NonceSize()], r.Body[aead.NonceSize():], nil)
	if err != nil {
		return errors.New("idempotency: a kept reply does not open with its key")
	}
	r.Body = body
	return nil
}
