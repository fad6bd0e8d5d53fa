package queue

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// Member is the sorted-set member of an entry. Among equal scores Redis orders members
// by their bytes, and this encoding makes that order schedule.Less's: 9-priority first, then kind,
// then the zero-padded id. A rotate member carries its period and end after the key, so
// it is one member per task however often it rotates.
func Member(e schedule.Entry) string {
	var b strings.Builder
	b.Grow(40)
	b.WriteByte(byte('0' + 9 - e.Priority))
	b.WriteByte('|')
	if e.LogID != "" {
		if e.Confirm {
			b.WriteString("c|") // sorts before d, as a confirm entry does in Less
		} else {
			b.WriteString("d|") // sorts before o and r, as kind 0 does in Less
		}
		b.WriteString(e.LogID)
		if e.Windows != "" {
			b.WriteString("|w=")
			b.WriteString(e.Windows)
		}
		return b.String()
	}
	b.WriteByte(kindLetter(e.Task.Kind))
	b.WriteByte('|')
	id := strconv.FormatInt(e.Task.ID, 10)
	for i := len(id); i < 19; i++ {
		b.WriteByte('0')
	}
	b.WriteString(id)
	if e.Task.Kind == taskd.KindRotate {
		b.WriteByte('|')
		b.WriteString(strconv.FormatInt(int64(e.Space/time.Second), 10))
		b.WriteByte('|')
		if !e.End.IsZero() {
			b.WriteString(strconv.FormatInt(e.End.Unix(), 10))
		} else {
			b.WriteByte('0')
		}
		if e.Cron != "" {
			b.WriteString("|c=")
			b.WriteString(e.Cron)
		}
		switch e.Misfire {
		case taskd.MisfireLatest:
			b.WriteString("|m=l")
		case taskd.MisfireSkip:
			b.WriteString("|m=s")
		}
	}
	if e.Windows != "" {
		b.WriteString("|w=")
		b.WriteString(e.Windows)
	}
	if e.DDI {
		b.WriteString("|d=1")
	}
	return b.String()
}

func kindLetter(k taskd.Kind) byte {
	if k == taskd.KindRotate {
		return 'r'
	}
	return 'o'
}

// ParseMember is the inverse of Member, given the score (due time in Unix seconds).
func ParseMember(member string, score int64) (schedule.Entry, error) {
	// Split on "|" into at most 10 parts, without allocating (a peek parses one member
	// per poll).
	var buf [10]string
	n := 0
	for rest, more := member, true; more; n++ {
		if n == len(buf) {
			return schedule.Entry{}, fmt.Errorf("heap member %q: malformed", member)
		}
		buf[n], rest, more = strings.Cut(rest, "|")
	}
	parts := buf[:n]
	if len(parts) < 3 || len(parts[0]) != 1 || len(parts[1]) != 1 {
		return schedule.Entry{}, fmt.Errorf("heap member %q: malformed", member)
	}
	// The tagged parts at the end: a rotate task's cron (c=) and misfire policy (m=),
	// a task's windows (w=), a DDI deployment's mark (d=).
	var cron, windows string
	var ddi bool
	var misfire taskd.Misfire
	for len(parts) > 3 && len(parts[len(parts)-1]) > 1 && parts[len(parts)-1][1] == '=' {
		last := parts[len(parts)-1]
		switch last[0] {
		case 'c':
			cron = last[2:]
		case 'w':
			windows = last[2:]
		case 'd':
			if last[2:] != "1" {
				return schedule.Entry{}, fmt.Errorf("heap member %q: bad part %q", member, last)
			}
			ddi = true
		case 'm':
			switch last[2:] {
			case "l":
				misfire = taskd.MisfireLatest
			case "s":
				misfire = taskd.MisfireSkip
			default:
				return schedule.Entry{}, fmt.Errorf("heap member %q: bad misfire %q", member, last)
			}
		default:
			return schedule.Entry{}, fmt.Errorf("heap member %q: unknown part %q", member, last)
		}
		parts = parts[:len(parts)-1]
	}
	if len(parts) != 3 && len(parts) != 5 {
		return schedule.Entry{}, fmt.Errorf("heap member %q: malformed", member)
	}
	e := schedule.Entry{Priority: 9 - int(parts[0][0]-'0'), DueAt: time.Unix(score, 0).UTC()}
	switch parts[1] {
	case "d", "c":
		if len(parts) != 3 || parts[2] == "" {
			return schedule.Entry{}, fmt.Errorf("heap member %q: bad waiting dispatch", member)
		}
		e.LogID, e.Windows, e.Confirm = parts[2], windows, parts[1] == "c"
		return e, nil
	case "o":
		e.Task.Kind = taskd.KindOnce
	case "r":
		e.Task.Kind = taskd.KindRotate
	default:
		return schedule.Entry{}, fmt.Errorf("heap member %q: bad kind", member)
	}
	id, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return schedule.Entry{}, fmt.Errorf("heap member %q: %w", member, err)
	}
	e.Task.ID, e.Windows, e.DDI = id, windows, ddi
	if e.Task.Kind == taskd.KindRotate {
		if len(parts) != 5 {
			return schedule.Entry{}, fmt.Errorf("heap member %q: rotate without period", member)
		}
		space, err1 := strconv.ParseInt(parts[3], 10, 64)
		end, err2 := strconv.ParseInt(parts[4], 10, 64)
		e.Cron, e.Misfire = cron, misfire // the period is 0 with a cron
		if err1 != nil || err2 != nil || (space <= 0) == (e.Cron == "") {
			return schedule.Entry{}, fmt.Errorf("heap member %q: bad period, end or cron", member)
		}
		e.Space = time.Duration(space) * time.Second
		if end != 0 {
			e.End = time.Unix(end, 0).UTC()
		}
	}
	return e, nil
}
