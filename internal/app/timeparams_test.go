package app_test

import (
	"strings"
	"testing"
)

// Issue 42, times: a time parameter MySQL's DATETIME cannot hold (before 1000-01-01 or
// after 9999-12-31 in UTC) is a 400 naming the parameter, on every endpoint that takes
// one; before, year 0000 reached MySQL and answered 500.
func TestTimeParametersOutOfDatetimeRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	for _, c := range []struct{ path, param string }{
		{"/v1/admin/clients?seen_before=", "seen_before"},
		{"/v1/admin/clients?seen_after=", "seen_after"},
		{"/v1/admin/stats?from=", "from"},
		{"/v1/admin/stats/agents?from=", "from"},
		{"/v1/admin/events?from=", "from"},
		{"/v1/admin/audit?from=", "from"},
		{"/v1/admin/dispatches?from=", "from"},
		{"/v1/admin/schedule?executor=uid_1&from=", "from"},
		{"/v1/admin/stats?to=", "to"},
	} {
		for _, v := range []string{"0000-01-01T00:00:00Z", "0999-12-31T23:59:59Z", "1000-01-01T00:30:00%2B01:00", "9999-12-31T23:00:00-05:00"} {
			code, out := e.do(0, "GET", c.path+v, adminToken, nil)
			errObj, _ := out["error"].(map[string]any)
			msg, _ := errObj["message"].(string)
			if code != 400 || !strings.HasPrefix(msg, c.param+":") {
				t.Errorf("GET %s%s: %d %v, want 400 naming %s", c.path, v, code, out, c.param)
			}
		}
	}
	// The edges themselves are taken.
	if code, out := e.do(0, "GET", "/v1/admin/clients?seen_after=1000-01-01T00:00:00Z&seen_before=9999-12-31T23:59:59Z", adminToken, nil); code != 200 {
		t.Errorf("the range's edges: %d %v", code, out)
	}
}
