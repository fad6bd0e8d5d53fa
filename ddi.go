package taskd

import (
	"encoding/json"
	"fmt"
	"time"
)

// DDISchema is the params schema of every DDI template: a software deployment of
// chunks, each with its artifacts, given by URL and hashes or by the id of an artifact
// uploaded to the server. update (and download) say how the controller treats it
// ("attempt": it may decline; "forced" when absent, as SWUpdate expects a value).
const DDISchema = `{"type":"object","required":["chunks"],"additionalProperties":false,"properties":{` +
	`"update":{"enum":["forced","attempt"]},"download":{"enum":["forced","attempt"]},` +
	`"chunks":{"type":"array","minItems":1,"maxItems":32,"items":{"type":"object",` +
	`"required":["part","name","version","artifacts"],"additionalProperties":false,"properties":{` +
	`"part":{"type":"string","minLength":1,"maxLength":128},` +
	`"name":{"type":"string","minLength":1,"maxLength":128},` +
	`"version":{"type":"string","minLength":1,"maxLength":128},` +
	`"artifacts":{"type":"array","minItems":1,"maxItems":64,"items":{"oneOf":[` +
	`{"type":"object","required":["artifact_id"],"additionalProperties":false,"properties":{"artifact_id":{"type":"integer","minimum":1}}},` +
	`{"type":"object","required":["filename","size","hashes","url"],"additionalProperties":false,"properties":{` +
	`"filename":{"type":"string","minLength":1,"maxLength":255,"pattern":"^[^/\\\\]+$"},` +
	`"size":{"type":"integer","minimum":0},` +
	`"hashes":{"type":"object","required":["sha1"],"additionalProperties":false,"properties":{` +
	`"sha1":{"type":"string","pattern":"^[0-9a-fA-F]{40}$"},` +
	`"md5":{"type":"string","pattern":"^[0-9a-fA-F]{32}$"},` +
	`"sha256":{"type":"string","pattern":"^[0-9a-fA-F]{64}$"}}},` +
	`"url":{"type":"string","minLength":1,"maxLength":2048,"pattern":"^https?://"}}}]}}}}}}}`

// Deployment is the params of a DDI template's task, as DDISchema allows them.
type Deployment struct {
	Update   string  `json:"update,omitempty"`
	Download string  `json:"download,omitempty"`
	Chunks   []Chunk `json:"chunks"`
}

// Chunk is a part of a deployment (hawkBit's software module).
type Chunk struct {
	Part      string        `json:"part"`
	Name      string        `json:"name"`
	Version   string        `json:"version"`
	Artifacts []ArtifactRef `json:"artifacts"`
}

// ArtifactRef is a file of a chunk: one uploaded to the server (ArtifactID), or one
// elsewhere (URL, with its name, size and hashes).
type ArtifactRef struct {
	ArtifactID int64   `json:"artifact_id,omitempty"`
	Filename   string  `json:"filename,omitempty"`
	Size       int64   `json:"size,omitempty"`
	Hashes     *Hashes `json:"hashes,omitempty"`
	URL        string  `json:"url,omitempty"`
}

// ParseDeployment reads a DDI task's params (already checked against DDISchema).
func ParseDeployment(params json.RawMessage) (Deployment, error) {
	var d Deployment
	if err := json.Unmarshal(params, &d); err != nil {
		return d, fmt.Errorf("deployment params: %w", err)
	}
	return d, nil
}

// DDISleep is how a hawkBit poll says when to come back: HH:MM:SS, which SWUpdate
// reads with strptime, so at least a second (0 means its own default) and under a day.
func DDISleep(d time.Duration) string {
	d = min(max(d, time.Second), 24*time.Hour-time.Second).Truncate(time.Second)
	s := int(d / time.Second)
	return fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
}

// MaxActionID is the last action id a DDI controller can read (a signed 32-bit
// integer: SWUpdate parses the id with json_object_get_int).
const MaxActionID = 1<<31 - 1

// DDIAction is a dispatch to a DDI controller, under the number the controller knows
// it by.
type DDIAction struct {
	ID  int64
	UID string
	// Closed says the controller closed it (its last feedback, or its acknowledgement
	// of a cancel), or the server found its dispatch ended otherwise.
	Closed bool
	// Dispatch is the action's dispatch record.
	Dispatch *Dispatch
}
