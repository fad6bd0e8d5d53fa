package client

import (
	"context"
	"io"
	"iter"
	"net/http"
	"strconv"
)

// CreateCampaign creates a campaign, in state created (MoveCampaign "start" runs
// it). It sends an Idempotency-Key (a random one unless given), so
// its retries create one campaign at most.
func (cl *Client) CreateCampaign(ctx context.Context, spec CampaignSpec, opts ...Option) (Campaign, error) {
	return send[Campaign](cl, ctx, http.MethodPost, "/v1/admin/campaigns", spec, true, opts)
}

// Campaigns lists the campaigns, newest first; Filter's State narrows it.
func (cl *Client) Campaigns(ctx context.Context, f Filter) iter.Seq2[Campaign, error] {
	return list[Campaign](cl, ctx, "/v1/admin/campaigns", f, "campaigns", "state")
}

// Campaign reads a campaign; its Version is for MoveCampaign's IfMatch.
func (cl *Client) Campaign(ctx context.Context, id int64) (Campaign, error) {
	return send[Campaign](cl, ctx, http.MethodGet, campaignPath(id), nil, false, nil)
}

// CampaignFailures reads a campaign's latest failures.
func (cl *Client) CampaignFailures(ctx context.Context, id int64) (CampaignFailures, error) {
	return send[CampaignFailures](cl, ctx, http.MethodGet, campaignPath(id)+"/failures", nil, false, nil)
}

// UploadCampaignItems appends uids to a campaign created with an empty uid list,
// streamed from body: contentType "application/x-ndjson" (one JSON string per line)
// or "text/csv" (one uid per line). An upload the server refuses for want of a free
// slot (503) or a rate limit (429) is sent again if body is an io.Seeker.
func (cl *Client) UploadCampaignItems(ctx context.Context, id int64, contentType string, body io.Reader) (Campaign, error) {
	c := newCall(http.MethodPost, campaignPath(id)+"/items", nil)
	c.stream, c.refusedSafe = body, true
	c.header.Set("Content-Type", contentType)
	c.meta = &replyMeta{}
	var out Campaign
	err := cl.do(ctx, c, &out)
	out.Version = c.meta.etag
	return out, err
}

// MoveCampaign moves a campaign: "start", "pause", "resume" or "stop".
func (cl *Client) MoveCampaign(ctx context.Context, id int64, move string, opts ...Option) (Campaign, error) {
	return send[Campaign](cl, ctx, http.MethodPost, campaignPath(id)+"/"+esc(move), nil, false, opts)
}

func campaignPath(id int64) string { return "/v1/admin/campaigns/" + strconv.FormatInt(id, 10) }
