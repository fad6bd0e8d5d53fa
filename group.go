package taskd

// Groups. A group is kept by hand (its members are added and removed by an admin) or
// dynamic: its members are the clients whose latest agent report matches its rule, a
// label selector and a semantic-version constraint on the agent's version. A dynamic
// group's members are written by the server, when the rule is set and when a fetch
// reports an agent that changes what it matches; a claim reads a dynamic group's
// members exactly as a kept group's, so quotas, rollouts and snapshot targeting apply
// unchanged.

// Bounds of dynamic groups.
const (
	MaxDynamicGroups   = 100
	MaxSelector        = 1024
	MaxVersionSelector = 255
)

// DynamicGroup is a dynamic group's rule: Selector, a label selector in Kubernetes'
// syntax, and AgentVersion, a semantic-version constraint; either may be empty (no
// condition), not both.
type DynamicGroup struct {
	Selector     string `json:"selector,omitempty"`
	AgentVersion string `json:"agent_version,omitempty"`
}

// Check refuses, naming the field, a rule with neither condition or one out of bounds.
// The syntax is checked where the rule is parsed (internal/targeting).
func (g DynamicGroup) Check() error {
	switch {
	case g.Selector == "" && g.AgentVersion == "":
		return Errorf(CodeInvalid, "selector: a dynamic group needs a selector or an agent_version")
	case len(g.Selector) > MaxSelector:
		return Errorf(CodeInvalid, "selector: at most %d bytes, got %d", MaxSelector, len(g.Selector))
	case len(g.AgentVersion) > MaxVersionSelector:
		return Errorf(CodeInvalid, "agent_version: at most %d bytes, got %d", MaxVersionSelector, len(g.AgentVersion))
	}
	return nil
}

// Group is a group as GET /v1/admin/groups/{gid} shows it: its rule when it is
// dynamic, and how many members it has.
type Group struct {
	GID          string `json:"gid"`
	Dynamic      bool   `json:"dynamic"`
	Selector     string `json:"selector,omitempty"`
	AgentVersion string `json:"agent_version,omitempty"`
	Members      int    `json:"members"`
}
