package targeting_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/targeting"
)

func TestRules(t *testing.T) {
	prod := taskd.AgentInfo{Version: "1.5.2", Labels: map[string]string{"env": "prod", "region": "eu", "tier": "a"}}
	canary := taskd.AgentInfo{Version: "2.0.0-rc.1", Labels: map[string]string{"env": "prod", "canary": "yes"}}
	bare := taskd.AgentInfo{}
	for _, tc := range []struct {
		selector, version string
		want              [3]bool // prod, canary, bare
	}{
		{"env=prod", "", [3]bool{true, true, false}},
		{"env!=prod", "", [3]bool{false, false, true}}, // an absent label is not prod
		{"tier in (a,b)", "", [3]bool{true, false, false}},
		{"tier notin (a,b)", "", [3]bool{false, true, true}},
		{"canary", "", [3]bool{false, true, false}},
		{"!canary", "", [3]bool{true, false, true}},
		{"env=prod,region=eu", "", [3]bool{true, false, false}},
		{"", ">=1.4.0 <2", [3]bool{true, false, false}},
		{"", ">=2.0.0-0", [3]bool{false, true, false}}, // a pre-release only where the constraint names one
		{"env=prod", "<2", [3]bool{true, false, false}},
	} {
		r, err := targeting.Parse(taskd.DynamicGroup{Selector: tc.selector, AgentVersion: tc.version})
		if err != nil {
			t.Fatalf("%q %q: %v", tc.selector, tc.version, err)
		}
		var rs targeting.Rules
		for i, a := range []taskd.AgentInfo{prod, canary, bare} {
			if got := r.Matches(a); got != tc.want[i] {
				t.Errorf("%q %q on agent %d: %v, want %v", tc.selector, tc.version, i, got, tc.want[i])
			}
			if got := rs.Matches(taskd.DynamicGroup{Selector: tc.selector, AgentVersion: tc.version}, a); got != tc.want[i] {
				t.Errorf("cached %q %q on agent %d: %v", tc.selector, tc.version, i, got)
			}
		}
	}
}

func TestParseRefusesNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		g     taskd.DynamicGroup
		field string
	}{
		{taskd.DynamicGroup{}, "selector"},
		{taskd.DynamicGroup{Selector: "env in (a"}, "selector"},
		{taskd.DynamicGroup{Selector: "=x"}, "selector"},
		{taskd.DynamicGroup{Selector: strings.Repeat("a", taskd.MaxSelector+1)}, "selector"},
		{taskd.DynamicGroup{AgentVersion: ">=banana"}, "agent_version"},
		{taskd.DynamicGroup{AgentVersion: strings.Repeat("1", taskd.MaxVersionSelector+1)}, "agent_version"},
	} {
		_, err := targeting.Parse(tc.g)
		var te *taskd.Error
		if !errors.As(err, &te) || te.Code != taskd.CodeInvalid || !strings.HasPrefix(te.Message, tc.field+":") {
			t.Errorf("%+v: %v, want invalid naming %s", tc.g, err, tc.field)
		}
	}
}
