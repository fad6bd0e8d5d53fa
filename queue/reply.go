package queue

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Script replies. Each script's reply is read in one place, through these helpers and
// never a bare type assertion: a reply of another shape than the script's header gives
// (a script edited on one side only, a proxy in between) is an error naming the script
// and the position, not a panic or a silent zero.

// replyError says a script replied in another shape than its header gives.
type replyError struct {
	script string // the script's name, as its caller's errors say it
	pos    int    // the position in the reply (Go's index, from 0), or -1 for the reply as a whole
	want   string
	got    any
}

func (e *replyError) Error() string {
	at := fmt.Sprintf("%s script reply[%d]", e.script, e.pos)
	if e.pos < 0 {
		at = e.script + " script reply"
	}
	if e.got == nil {
		return fmt.Sprintf("%s: want %s", at, e.want)
	}
	return fmt.Sprintf("%s is %T %q, want %s", at, e.got, fmt.Sprint(e.got), e.want)
}

// intReply is cmd's reply as an integer: the script's reply, or the error Redis gave.
func intReply(script string, cmd *redis.Cmd) (int64, error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, &replyError{script: script, pos: -1, want: "an integer", got: v}
	}
	return n, nil
}

// textReply is cmd's reply as a string; ok is false for a nil reply (Lua's false).
func textReply(script string, cmd *redis.Cmd) (s string, ok bool, err error) {
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	s, ok = v.(string)
	if !ok {
		return "", false, &replyError{script: script, pos: -1, want: "a string", got: v}
	}
	return s, true, nil
}

// arrayReply is cmd's reply as an array, to be read field by field.
func arrayReply(script string, cmd *redis.Cmd) (*reply, error) {
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok {
		return nil, &replyError{script: script, pos: -1, want: "an array", got: v}
	}
	return &reply{script: script, v: a}, nil
}

// reply is a script's array reply, read field by field. The first field that is
// missing or of another type is kept in err (and reads as a zero); a decoder reads its
// fields, then checks err once.
type reply struct {
	script string
	v      []any
	err    error
}

// len is how many fields the reply has.
func (r *reply) len() int { return len(r.v) }

// fail notes that field i is not what was wanted, unless a field before it was not.
func (r *reply) fail(i int, want string, got any) {
	if r.err == nil {
		r.err = &replyError{script: r.script, pos: i, want: want, got: got}
	}
}

// int is field i, an integer.
func (r *reply) int(i int) int64 {
	if i >= len(r.v) {
		r.short(i, "an integer")
		return 0
	}
	n, ok := r.v[i].(int64)
	if !ok {
		r.fail(i, "an integer", r.v[i])
	}
	return n
}

// str is field i, a string.
func (r *reply) str(i int) string {
	if i >= len(r.v) {
		r.short(i, "a string")
		return ""
	}
	s, ok := r.v[i].(string)
	if !ok {
		r.fail(i, "a string", r.v[i])
	}
	return s
}

// short notes that the reply ends before field i.
func (r *reply) short(i int, want string) {
	r.fail(i, want+" (the reply has "+strconv.Itoa(len(r.v))+" fields)", nil)
}

// num is field i, a decimal integer sent as a string (a hash field's value).
func (r *reply) num(i int) int64 {
	s := r.str(i)
	if r.err != nil {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.fail(i, "a decimal integer", s)
	}
	return n
}
