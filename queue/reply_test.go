package queue

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A reply of another shape than its script's header gives is an error naming the
// script and the position, whichever decoder reads it.
func TestWrongShapedRepliesNameScriptAndPosition(t *testing.T) {
	t.Parallel()
	array := func(script string, v ...any) *reply { return &reply{script: script, v: v} }
	take := func(r *reply) error { _, err := decodeTake(r); return err }
	sync := func(r *reply) error { _, err := decodeSync(r); return err }
	for _, tc := range []struct {
		name   string
		decode func() error
		script string
		pos    int
	}{
		{"take: wait a string", func() error { return take(array("campaign take", int64(1), "5")) }, "campaign take", 1},
		{"take: status a string", func() error { return take(array("campaign take", "1", int64(0))) }, "campaign take", 0},
		{"take: unknown status", func() error { return take(array("campaign take", int64(7))) }, "campaign take", 0},
		{"take: not running, no state", func() error { return take(array("campaign take", int64(0))) }, "campaign take", 1},
		{"take: item cut short", func() error {
			return take(array("campaign take", int64(1), int64(0), int64(4), int64(1), int64(1000), int64(0)))
		}, "campaign take", 6},
		{"take: checkpoint an integer", func() error {
			return take(array("campaign take", int64(1), int64(0), int64(4), int64(1), int64(1000), int64(0), int64(3)))
		}, "campaign take", 6},
		{"sync: offset not a number", func() error {
			return sync(array("campaign sync", "running", "", "1", "x", "0", "0", "0", "0"))
		}, "campaign sync", 3},
		{"sync: cut short", func() error { return sync(array("campaign sync", "running", "")) }, "campaign sync", 2},
		{"sync: finished item an integer", func() error {
			return sync(array("campaign sync", "running", "", "1", "0", "0", "0", "0", "0", int64(4)))
		}, "campaign sync", 8},
		{"int: a string", func() error {
			_, err := intReply("campaign complete", redis.NewCmdResult("1", nil))
			return err
		}, "campaign complete", -1},
		{"text: an integer", func() error {
			_, _, err := textReply("generation", redis.NewCmdResult(int64(3), nil))
			return err
		}, "generation", -1},
		{"array: a string", func() error {
			_, err := arrayReply("campaign take", redis.NewCmdResult("1", nil))
			return err
		}, "campaign take", -1},
		{"peek: unknown status", func() error { _, err := decodePeek("what", "", nil); return err }, "peek", 0},
		{"peek: ok cut short", func() error { _, err := decodePeek("ok\n-\n1", "", nil); return err }, "peek", 3},
		{"peek: due member without score", func() error {
			_, err := decodePeek("ok\n-\n1\n\n\n\n\nm", "", nil)
			return err
		}, "peek", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode()
			var re *replyError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a replyError", err)
			}
			if re.script != tc.script || re.pos != tc.pos {
				t.Errorf("error names %s at %d, want %s at %d (%v)", re.script, re.pos, tc.script, tc.pos, err)
			}
			if !strings.HasPrefix(err.Error(), tc.script+" script reply") {
				t.Errorf("error %q does not start with the script's name", err)
			}
		})
	}
}

// The decoders read replies of the right shape as before.
func TestRightShapedReplies(t *testing.T) {
	t.Parallel()
	res, err := decodeTake(&reply{script: "campaign take", v: []any{int64(1), int64(0),
		int64(4), int64(2), int64(1000), int64(1), `{"a":1}`, int64(5), int64(1), int64(2000), int64(0), ""}})
	if err != nil || len(res.Items) != 2 || res.Items[0].Item != 4 || res.Items[0].Attempt != 2 || !res.Items[0].Redo ||
		string(res.Items[0].Checkpoint) != `{"a":1}` || res.Items[1].Item != 5 || res.Items[1].Checkpoint != nil {
		t.Errorf("decodeTake = %+v, %v", res, err)
	}
	if _, err := decodeTake(&reply{script: "campaign take", v: []any{int64(-1)}}); !errors.Is(err, ErrCampaignMissing) {
		t.Errorf("decodeTake of {-1} = %v, want ErrCampaignMissing", err)
	}
	if res, err := decodeTake(&reply{script: "campaign take", v: []any{int64(0), "paused"}}); err != nil || res.State != "paused" {
		t.Errorf("decodeTake of {0, paused} = %+v, %v", res, err)
	}
	p, err := decodeSync(&reply{script: "campaign sync", v: []any{"running", "", "3", "10", "12", "9", "1", "2", "14", "15"}})
	if err != nil || p.Epoch != 3 || p.Offset != 10 || p.Next != 12 || p.Done != 9 || p.Failed != 1 || p.InFlight != 2 ||
		len(p.Finished) != 2 || p.Finished[1] != 15 {
		t.Errorf("decodeSync = %+v, %v", p, err)
	}
	if p, err := decodeSync(&reply{script: "campaign sync", v: []any{}}); p != nil || err != nil {
		t.Errorf("decodeSync of {} = %+v, %v, want nil, nil", p, err)
	}
	if _, ok, err := textReply("generation", redis.NewCmdResult(nil, redis.Nil)); ok || err != nil {
		t.Errorf("textReply of nil = %v, %v, want not ok, no error", ok, err)
	}
}
