package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// CreateTemplate creates a template from t's name, schema and defaults (what the
// server sets is not sent). It sends an Idempotency-Key (a random one unless given),
// so its retries create one template at most.
func (cl *Client) CreateTemplate(ctx context.Context, t Template, opts ...Option) (Template, error) {
	t.ID, t.Version, t.Warnings = 0, "", nil
	t.CreatedAt, t.UpdatedAt = time.Time{}, time.Time{}
	if len(t.Schema) == 0 {
		t.Schema = json.RawMessage(`{}`)
	}
	return send[Template](cl, ctx, http.MethodPost, "/v1/admin/templates", t, true, opts)
}

// Templates lists the templates.
func (cl *Client) Templates(ctx context.Context) ([]Template, error) {
	var out struct {
		Templates []Template `json:"templates"`
	}
	err := cl.do(ctx, newCall(http.MethodGet, "/v1/admin/templates", nil), &out)
	return out.Templates, err
}

// Template reads a template.
func (cl *Client) Template(ctx context.Context, id int64) (Template, error) {
	return send[Template](cl, ctx, http.MethodGet, templatePath(id), nil, false, nil)
}

// UpdateTemplate edits a template with a JSON merge patch (RFC 7396): the fields
// patch names are set (null: back to the server's default), the others kept. The
// editable fields are name, stages, windows and the defaults (lease_seconds,
// max_attempts, retry_*, dispatch_rate_per_minute, confirm_seconds).
func (cl *Client) UpdateTemplate(ctx context.Context, id int64, patch map[string]any, opts ...Option) (Template, error) {
	return send[Template](cl, ctx, http.MethodPatch, templatePath(id), patch, false, opts)
}

// DeleteTemplate deletes a template no task uses.
func (cl *Client) DeleteTemplate(ctx context.Context, id int64, opts ...Option) error {
	_, err := send[struct{}](cl, ctx, http.MethodDelete, templatePath(id), nil, false, opts)
	return err
}

func templatePath(id int64) string { return "/v1/admin/templates/" + strconv.FormatInt(id, 10) }

// send sends body (nil: none) as JSON and decodes the reply as T; a reply's ETag
// becomes the Version of a T that keeps it out of its body (campaigns, rollouts).
func send[T any](cl *Client, ctx context.Context, method, path string, body any, create bool, opts []Option) (T, error) {
	var out T
	c := newCall(method, path, opts)
	c.create = create
	c.meta = &replyMeta{}
	if body != nil {
		if _, err := c.jsonBody(body); err != nil {
			return out, err
		}
	}
	if err := cl.do(ctx, c, &out); err != nil {
		return out, err
	}
	setVersion(&out, c.meta.etag)
	return out, nil
}

// setVersion gives the records whose body has no version their ETag's.
func setVersion(v any, etag Version) {
	switch r := v.(type) {
	case *Campaign:
		r.Version = etag
	case *RolloutState:
		r.Version = etag
	}
}

// esc escapes a path segment.
func esc(s string) string { return url.PathEscape(s) }
