// Package deploy holds deployment files: the Elasticsearch template and lifecycle policy
// (deploy/elasticsearch), the Kibana saved objects (deploy/kibana). Its tests check the
// repository's docker-compose.yml and Dockerfile, which cannot be run here, against the
// binaries' configuration code.
package deploy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gopkg.in/yaml.v3"

	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/logsink"
)

const (
	repoRoot    = ".."
	composePath = "../docker-compose.yml"
)

// compose is the part of the Compose file format the tests look at.
type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string       `yaml:"image"`
	Build       any          `yaml:"build"` // a context path, or {context, dockerfile}
	Entrypoint  any          `yaml:"entrypoint"`
	Restart     string       `yaml:"restart"`
	Environment any          `yaml:"environment"` // a map, or a list of K=V
	DependsOn   any          `yaml:"depends_on"`  // a list, or a map of {condition}
	Healthcheck *healthcheck `yaml:"healthcheck"`
	Volumes     []any        `yaml:"volumes"` // "src:dst[:mode]", or {type, source, target}
	Ports       []any        `yaml:"ports"`
}

type healthcheck struct {
	Test    any  `yaml:"test"`
	Disable bool `yaml:"disable"`
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	b, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml: no services")
	}
	return c
}

// interpolate resolves Compose's variable syntax as if no variable were set: ${X:-d}
// and ${X-d} give d, ${X} and $X give "", $$ is a literal $.
func interpolate(s string) string {
	re := regexp.MustCompile(`\$\$|\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	return re.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		return re.FindStringSubmatch(m)[1]
	})
}

// oneShot says whether a service runs to completion rather than staying up.
func (s service) oneShot() bool { return s.Restart == "no" }

// env returns the service's environment, interpolated.
func (s service) env(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch e := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k, v := range e {
			if v == nil {
				out[k] = ""
			} else {
				out[k] = interpolate(fmt.Sprint(v))
			}
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			out[k] = interpolate(v)
		}
	default:
		t.Fatalf("environment of unexpected form %T", e)
	}
	return out
}

// dependsOn maps each service this one depends on to the condition it waits for.
func (s service) dependsOn(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch d := s.DependsOn.(type) {
	case nil:
	case []any:
		for _, name := range d {
			out[fmt.Sprint(name)] = "service_started"
		}
	case map[string]any:
		for name, v := range d {
			cond := "service_started"
			if m, ok := v.(map[string]any); ok && m["condition"] != nil {
				cond = fmt.Sprint(m["condition"])
			}
			out[name] = cond
		}
	default:
		t.Fatalf("depends_on of unexpected form %T", d)
	}
	return out
}

// strs flattens a string-or-list field (entrypoint, healthcheck test).
func strs(v any) []string {
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, len(v))
		for i, x := range v {
			out[i] = fmt.Sprint(x)
		}
		return out
	}
	return []string{fmt.Sprint(v)}
}

// dockerfile returns the path of the Dockerfile a service is built from, "" if none.
func (s service) dockerfile(t *testing.T) string {
	t.Helper()
	switch b := s.Build.(type) {
	case nil:
		return ""
	case string:
		return filepath.Join(repoRoot, b, "Dockerfile")
	case map[string]any:
		ctx, file := ".", "Dockerfile"
		if b["context"] != nil {
			ctx = fmt.Sprint(b["context"])
		}
		if b["dockerfile"] != nil {
			file = fmt.Sprint(b["dockerfile"])
		}
		return filepath.Join(repoRoot, ctx, file)
	}
	t.Fatalf("build of unexpected form %T", s.Build)
	return ""
}

// binary names the program a service built from this repository runs: its entrypoint,
// or else the Dockerfile's. Third-party images give "".
func (s service) binary(t *testing.T) string {
	t.Helper()
	df := s.dockerfile(t)
	if df == "" {
		return ""
	}
	if ep := strs(s.Entrypoint); len(ep) > 0 {
		return path.Base(ep[0])
	}
	b, err := os.ReadFile(df)
	if err != nil {
		t.Fatal(err)
	}
	var ep []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(rest), &ep); err != nil {
				t.Fatalf("%s: ENTRYPOINT is not in exec form: %v", df, err)
			}
		}
	}
	if len(ep) == 0 {
		t.Fatalf("%s: no ENTRYPOINT", df)
	}
	return path.Base(ep[0])
}

// settingsOf lists the environment variables each of the project's binaries reads.
func settingsOf(binary string) []string {
	switch binary {
	case "dispatchd":
		return append(app.EnvNames(), logsink.RelayEnvNames()...)
	case "logsink":
		return logsink.EnvNames()
	}
	return nil
}

// TestComposeSetsOnlyRealSettings: every DISPATCH_* variable is one the service's binary
// reads, the values pass the binary's own loading and validation, and the relay in
// dispatchd writes the topic logsink reads.
func TestComposeSetsOnlyRealSettings(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	var relayTopic, sinkTopic string
	seen := map[string]bool{}
	for name, svc := range c.Services {
		env := svc.env(t)
		bin := svc.binary(t)
		seen[bin] = true
		known := settingsOf(bin)
		for k := range env {
			if strings.HasPrefix(k, "DISPATCH_") && !slices.Contains(known, k) {
				if bin == "" {
					t.Errorf("service %s (image %s): sets %s but does not run a taskd binary", name, svc.Image, k)
				} else {
					t.Errorf("service %s: %s is not a setting of %s (see docs/CONFIG.md)", name, k, bin)
				}
			}
		}
		getenv := func(k string) string { return env[k] }
		switch bin {
		case "dispatchd":
			cfg, err := app.LoadConfig(nil, getenv, io.Discard)
			if err != nil {
				t.Errorf("service %s: dispatchd refuses its environment: %v", name, err)
				continue
			}
			rc, err := logsink.LoadRelayConfig(getenv)
			if err == nil && len(cfg.KafkaBrokers) > 0 {
				rc.Brokers = cfg.KafkaBrokers
				err = rc.Validate()
			}
			if err != nil {
				t.Errorf("service %s: the relay refuses its environment: %v", name, err)
			}
			relayTopic = rc.Topic
		case "logsink":
			cfg := logsink.DefaultConfig()
			err := cfg.Load(nil, getenv, io.Discard)
			if err == nil {
				err = cfg.Validate()
			}
			if err != nil {
				t.Errorf("service %s: logsink refuses its environment: %v", name, err)
			}
			sinkTopic = cfg.Topic
		}
	}
	for _, bin := range []string{"dispatchd", "logsink"} {
		if !seen[bin] {
			t.Errorf("no service runs %s", bin)
		}
	}
	if relayTopic != sinkTopic {
		t.Errorf("the relay writes topic %q but logsink reads %q", relayTopic, sinkTopic)
	}
}

// TestComposeAddressesReachDependencies: the addresses a binary is given are services
// it waits for, and a Kafka address is one the broker advertises.
func TestComposeAddressesReachDependencies(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	for name, svc := range c.Services {
		env := svc.env(t)
		deps := svc.dependsOn(t)
		var hosts []string // host:port
		if dsn := env["DISPATCH_MYSQL_DSN"]; dsn != "" {
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				t.Errorf("service %s: DISPATCH_MYSQL_DSN: %v", name, err)
			} else {
				hosts = append(hosts, cfg.Addr)
			}
		}
		if a := env["DISPATCH_REDIS_ADDR"]; a != "" {
			hosts = append(hosts, a)
		}
		for _, u := range strings.Split(env["DISPATCH_ES_URLS"], ",") {
			if u = strings.TrimSpace(u); u != "" {
				pu, err := url.Parse(u)
				if err != nil || pu.Port() == "" {
					t.Errorf("service %s: DISPATCH_ES_URLS %q: want scheme://host:port", name, u)
					continue
				}
				hosts = append(hosts, pu.Host)
			}
		}
		var brokers []string
		for _, b := range strings.Split(env["DISPATCH_KAFKA_BROKERS"], ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
		hosts = append(hosts, brokers...)
		for _, hp := range hosts {
			host, _, err := net.SplitHostPort(hp)
			if err != nil {
				t.Errorf("service %s: address %q: %v", name, hp, err)
				continue
			}
			if _, ok := c.Services[host]; !ok {
				t.Errorf("service %s: address %s is not a service of this file", name, hp)
			} else if _, ok := deps[host]; !ok {
				t.Errorf("service %s: uses %s but does not depend on %s", name, hp, host)
			}
		}
		for _, b := range brokers {
			host, _, _ := net.SplitHostPort(b)
			advertised := c.Services[host].env(t)["KAFKA_ADVERTISED_LISTENERS"]
			if !strings.Contains(advertised+",", "://"+b+",") {
				t.Errorf("service %s: broker %s is not among %s's advertised listeners %q", name, b, host, advertised)
			}
		}
	}
}

// TestComposeDependsOn: dependencies exist, form no cycle, and are waited for properly:
// a long-running one until healthy, a one-shot one until it completed successfully.
func TestComposeDependsOn(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	for name, svc := range c.Services {
		for dep, cond := range svc.dependsOn(t) {
			target, ok := c.Services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which is not defined", name, dep)
			case target.oneShot() && cond != "service_completed_successfully":
				t.Errorf("service %s waits for one-shot %s with %s, want service_completed_successfully", name, dep, cond)
			case !target.oneShot() && cond != "service_healthy":
				t.Errorf("service %s waits for %s with %s, want service_healthy", name, dep, cond)
			}
		}
	}
	// No cycles: depth-first search, with the path on the stack.
	state := map[string]int{} // 1 on the path, 2 done
	var visit func(name string, path []string)
	visit = func(name string, path []string) {
		switch state[name] {
		case 1:
			t.Errorf("depends_on cycle: %s", strings.Join(append(path, name), " -> "))
			return
		case 2:
			return
		}
		state[name] = 1
		for dep := range c.Services[name].dependsOn(t) {
			if _, ok := c.Services[dep]; ok {
				visit(dep, append(path, name))
			}
		}
		state[name] = 2
	}
	for name := range c.Services {
		visit(name, nil)
	}
}

// TestComposeImagesPinned: every image names at least a major version (no untagged
// image, no latest); services without an image are built here. The Elastic images
// share one version, as Kibana requires.
func TestComposeImagesPinned(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	elastic := map[string]string{}
	for name, svc := range c.Services {
		if svc.Image == "" {
			if svc.Build == nil {
				t.Errorf("service %s has neither image nor build", name)
			}
			continue
		}
		if svc.Build != nil {
			continue // the tag of an image built here is ours to choose
		}
		img := interpolate(svc.Image)
		if strings.Contains(img, "@sha256:") {
			continue
		}
		last := img[strings.LastIndex(img, "/")+1:] // a registry host may carry a port
		repo, tag, ok := strings.Cut(last, ":")
		switch {
		case !ok || tag == "":
			t.Errorf("service %s: image %s has no tag", name, img)
		case tag == "latest":
			t.Errorf("service %s: image %s uses latest", name, img)
		case tag[0] < '0' || tag[0] > '9':
			t.Errorf("service %s: image %s: tag %q does not start with a version", name, img, tag)
		}
		if strings.HasPrefix(img, "docker.elastic.co/") {
			elastic[repo] = tag
		}
	}
	if es, kb := elastic["elasticsearch"], elastic["kibana"]; es != kb {
		t.Errorf("Elasticsearch %s and Kibana %s must be the same version", es, kb)
	}
}

// TestComposeHealthchecks: every service says whether it stays up; those that do have
// a healthcheck.
func TestComposeHealthchecks(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	for name, svc := range c.Services {
		if svc.Restart == "" {
			t.Errorf("service %s: set restart (unless-stopped, or \"no\" for a one-shot service)", name)
			continue
		}
		if svc.oneShot() {
			continue
		}
		if svc.Healthcheck == nil || svc.Healthcheck.Disable {
			t.Errorf("service %s: long-running, but no healthcheck", name)
			continue
		}
		test := strs(svc.Healthcheck.Test)
		if len(test) == 0 || test[0] == "NONE" || (len(test) == 1 && (test[0] == "CMD" || test[0] == "CMD-SHELL")) {
			t.Errorf("service %s: healthcheck test %q runs nothing", name, test)
		}
	}
}

// TestComposeVolumes: named volumes are declared (and every declared one is used); bind
// mounts point at files of the repository.
func TestComposeVolumes(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	used := map[string]bool{}
	for name, svc := range c.Services {
		for _, v := range svc.Volumes {
			var src string
			switch v := v.(type) {
			case string:
				parts := strings.Split(v, ":")
				if len(parts) < 2 {
					continue // an anonymous volume
				}
				src = parts[0]
			case map[string]any:
				if v["type"] != nil && v["type"] != "volume" && v["type"] != "bind" {
					continue // tmpfs and the like
				}
				src = fmt.Sprint(v["source"])
			}
			switch {
			case strings.HasPrefix(src, "."):
				if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
					t.Errorf("service %s: bind mount: %v", name, err)
				}
			case strings.HasPrefix(src, "/") || strings.HasPrefix(src, "~"):
				t.Errorf("service %s: bind mount of %s, outside the repository", name, src)
			default:
				used[src] = true
				if _, ok := c.Volumes[src]; !ok {
					t.Errorf("service %s: volume %s is not declared under volumes:", name, src)
				}
			}
		}
	}
	for v := range c.Volumes {
		if !used[v] {
			t.Errorf("volume %s is declared but no service uses it", v)
		}
	}
}

// TestComposePortsDocumented: every port published on the host is listed in the
// comment at the top of the file.
func TestComposePortsDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	var header strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		header.WriteString(line + "\n")
	}
	c := loadCompose(t)
	for name, svc := range c.Services {
		for _, p := range svc.Ports {
			s, ok := p.(string)
			if !ok {
				t.Errorf("service %s: write ports as \"[ip:]host:container\" strings", name)
				continue
			}
			parts := strings.Split(s, ":")
			if len(parts) < 2 {
				t.Errorf("service %s: port %q publishes on a random host port", name, s)
				continue
			}
			host := parts[len(parts)-2]
			if !regexp.MustCompile(`(?m)^#\s+` + regexp.QuoteMeta(host) + `\s`).MatchString(header.String()) {
				t.Errorf("service %s: host port %s is not listed in the header comment", name, host)
			}
		}
	}
}

// TestDockerfile: both binaries are built static and trimmed, and run as a non-root user.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/dispatchd", "./cmd/logsink", "EXPOSE 8080"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	var user string
	for _, line := range strings.Split(df, "\n") {
		if rest, ok := strings.CutPrefix(line, "FROM "); ok {
			user = "" // each stage starts as root again
			if f := strings.Fields(rest); strings.HasSuffix(f[0], ":latest") || !strings.Contains(f[0], ":") {
				t.Errorf("Dockerfile: base image %s is not pinned", f[0])
			}
		}
		if rest, ok := strings.CutPrefix(line, "USER "); ok {
			user = strings.TrimSpace(rest)
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("Dockerfile: the final stage runs as %q, want a non-root user", user)
	}
	for _, bin := range []string{"dispatchd", "logsink"} {
		if !strings.Contains(df, "/usr/local/bin/"+bin) && !strings.Contains(df, "/out/"+bin) {
			t.Errorf("Dockerfile: %s is not copied into the image", bin)
		}
	}
}

// TestComposeConfigWithCLI asks the docker compose CLI to validate the file when it is
// installed. No engine is needed for `config`; without the CLI the test is skipped and
// the checks above stand alone.
func TestComposeConfigWithCLI(t *testing.T) {
	t.Parallel()
	if err := exec.Command("docker", "compose", "version").Run(); err != nil {
		t.Skip("docker compose CLI not available")
	}
	out, err := exec.Command("docker", "compose", "-f", composePath, "config", "--quiet").CombinedOutput()
	if err != nil {
		t.Errorf("docker compose config: %v\n%s", err, out)
	}
}

func TestInterpolate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a:${V:-8.19.0}":    "a:8.19.0",
		"${V-x}":            "x",
		"${V}b":             "b",
		"$V":                "",
		"-p\"$$PASS\"":      "-p\"$PASS\"",
		"plain:3306/taskd":  "plain:3306/taskd",
		"${A:-1},${B:-two}": "1,two",
	} {
		if got := interpolate(in); got != want {
			t.Errorf("interpolate(%q) = %q, want %q", in, got, want)
		}
	}
}
