// Package targeting matches what agents report against the rules of dynamic groups: a
// label selector in Kubernetes' syntax (k=v, k!=v, k in (a,b), k notin (a,b), k, !k;
// a comma is "and"), parsed and matched by k8s.io/apimachinery's labels package, and a
// semantic-version constraint on the agent's version (>=1.4.0 <2), by
// github.com/Masterminds/semver. Both are the reference implementations of their
// syntax, so an operator's selector means here what it means in kubectl.
package targeting

import (
	"sync"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/taskpull/taskd"
)

// Rule is a dynamic group's rule, parsed.
type Rule struct {
	selector labels.Selector     // nil: any labels
	version  *semver.Constraints // nil: any version
}

// Parse reads a group's rule: selector and agentVersion, either of which may be empty
// (no condition), not both. An error names the field.
func Parse(g taskd.DynamicGroup) (Rule, error) {
	if err := g.Check(); err != nil {
		return Rule{}, err
	}
	var r Rule
	if g.Selector != "" {
		sel, err := labels.Parse(g.Selector)
		if err != nil {
			return Rule{}, taskd.Errorf(taskd.CodeInvalid, "selector: %v", err)
		}
		r.selector = sel
	}
	if g.AgentVersion != "" {
		c, err := semver.NewConstraint(g.AgentVersion)
		if err != nil {
			return Rule{}, taskd.Errorf(taskd.CodeInvalid, "agent_version: %v", err)
		}
		r.version = c
	}
	return r, nil
}

// Matches reports whether an agent that reported a matches the rule: its labels match
// the selector, and its version is a semantic version within the constraint (a
// version that is not one, or none, matches no constraint).
func (r Rule) Matches(a taskd.AgentInfo) bool {
	if r.selector != nil && !r.selector.Matches(labels.Set(a.Labels)) {
		return false
	}
	if r.version != nil {
		v, err := semver.NewVersion(a.Version)
		if err != nil || !r.version.Check(v) {
			return false
		}
	}
	return true
}

// Rules parses rules once and keeps them: a fetch matches a report against every
// dynamic group, and a group's rule seldom changes. It forgets them all when it holds
// more than a few times the groups there may be (rules edited away).
type Rules struct {
	mu     sync.Mutex
	parsed map[taskd.DynamicGroup]Rule
}

// Matches reports whether a matches rule g; a rule that does not parse (it was checked
// when it was stored) matches nothing.
func (rs *Rules) Matches(g taskd.DynamicGroup, a taskd.AgentInfo) bool {
	rs.mu.Lock()
	r, ok := rs.parsed[g]
	rs.mu.Unlock()
	if !ok {
		var err error
		if r, err = Parse(g); err != nil {
			return false
		}
		rs.mu.Lock()
		if rs.parsed == nil || len(rs.parsed) >= 4*taskd.MaxDynamicGroups {
			rs.parsed = map[taskd.DynamicGroup]Rule{}
		}
		rs.parsed[g] = r
		rs.mu.Unlock()
	}
	return r.Matches(a)
}
