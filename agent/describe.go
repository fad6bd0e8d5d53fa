package agent

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/taskpull/taskd/agent/internal/wire"
)

// An agent describes itself to the server, so that an operator sees the fleet (GET
// /v1/admin/clients, stats/agents): the version of the program (Config.Version), the
// machine (Config.Hostname), and labels (Config.Labels) to which the agent adds what
// it knows for free under a reserved prefix. The server keeps the latest per uid, so
// the description goes on the first fetch of a Run, and again only when it changed
// (SetLabels), when the fetch that carried it failed, or after the agent enrolled
// again.

// The labels the agent adds of itself, under reservedPrefix; a Config.Labels key
// with that prefix is refused.
const (
	reservedPrefix  = "taskd.dev/"
	labelSDKVersion = reservedPrefix + "sdk-version"
	labelOS         = reservedPrefix + "os"
	labelArch       = reservedPrefix + "arch"
	sdkModule       = "github.com/taskpull/taskd"
	maxLabels       = wire.MaxAgentLabels - 3
)

// NoHostname, as Config.Hostname, reports no hostname.
const NoHostname = "-"

// hostname is the hostname cfg reports: Config.Hostname, else the machine's name
// unless the server would refuse it (then none).
func hostname(cfg Config) string {
	switch cfg.Hostname {
	case NoHostname:
		return ""
	case "":
		if h, err := os.Hostname(); err == nil && (wire.Agent{Hostname: h}).Check() == nil {
			return h
		}
		return ""
	}
	return cfg.Hostname
}

// describe is the agent object of version, host and labels, with the SDK's own
// labels.
func describe(version, host string, labels map[string]string) (wire.Agent, error) {
	d := wire.Agent{Version: version, Hostname: host, Labels: map[string]string{}}
	if err := checkLabels(labels); err != nil {
		return wire.Agent{}, err
	}
	maps.Copy(d.Labels, labels)
	d.Labels[labelOS], d.Labels[labelArch] = runtime.GOOS, runtime.GOARCH
	if v := sdkVersion(); v != "" {
		d.Labels[labelSDKVersion] = v
	}
	if err := d.Check(); err != nil {
		return wire.Agent{}, fmt.Errorf("agent: %s", configNames.Replace(err.Error()))
	}
	return d, nil
}

// configNames names the agent object's fields as Config does.
var configNames = strings.NewReplacer("agent.version", "Version", "agent.hostname", "Hostname", "agent.labels", "Labels")

// checkLabels refuses labels the agent would not send: a key with the reserved
// prefix (the agent's own labels are to be trusted, whatever the program sets), or
// more than fit beside the agent's own.
func checkLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return fmt.Errorf("agent: Labels: at most %d (the server takes %d, and the agent adds %d of its own), got %d",
			maxLabels, wire.MaxAgentLabels, wire.MaxAgentLabels-maxLabels, len(labels))
	}
	for k := range labels {
		if strings.HasPrefix(k, reservedPrefix) {
			return fmt.Errorf("agent: Labels: %q: the prefix %s is the agent's own (%s, %s, %s)", k, reservedPrefix,
				labelSDKVersion, labelOS, labelArch)
		}
	}
	return nil
}

// sdkVersion is the version of this module the program was built with: its
// requirement's version, or its own when the program is part of the module
// ("(devel)" in a build from a checkout); "" when the binary does not say.
func sdkVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path == sdkModule {
		return bi.Main.Version
	}
	for _, m := range bi.Deps {
		if m.Path == sdkModule {
			if m.Replace != nil && m.Replace.Version != "" {
				return m.Replace.Version
			}
			return m.Version
		}
	}
	return ""
}

// SetLabels replaces the labels of Config.Labels (the agent's own stay): a running
// agent sends them on its next fetch. It refuses what New would. It is safe to call
// while Run runs.
func (a *Agent) SetLabels(labels map[string]string) error {
	a.descMu.Lock()
	defer a.descMu.Unlock()
	d, err := describe(a.desc.Version, a.desc.Hostname, labels)
	if err != nil {
		return err
	}
	if !maps.Equal(d.Labels, a.desc.Labels) {
		a.desc = d
		a.descGen++
	}
	return nil
}

// description is the agent object to send, and its generation (it counts changes).
func (a *Agent) description() (wire.Agent, int) {
	a.descMu.Lock()
	defer a.descMu.Unlock()
	return a.desc, a.descGen
}
