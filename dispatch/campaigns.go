package dispatch

import (
	"context"
	"encoding/json"
	"time"

	"github.com/taskpull/taskd"
)

// Campaigns hands out campaign items (package campaign): a fetch that finds no task
// due takes items of the running campaigns the user works.
type Campaigns interface {
	// Take hands uid up to n items of the campaigns it works whose template tk
	// allows; uid holds at most limit items of one campaign at once (at its limit it
	// gets those again, redo). With none, next is how soon one may be (nil: unknown).
	Take(ctx context.Context, uid string, n, limit int, tk taskd.Take, now time.Time) ([]taskd.CampaignItem, *time.Time, error)
	// Complete records uid's complete of an item (stale_lease when not uid's); a
	// failure's detail is kept among the campaign's latest failures.
	Complete(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage, now time.Time) error
	// Progress saves an item's checkpoint and, with extend, pushes its lease out.
	Progress(ctx context.Context, uid, logID string, checkpoint json.RawMessage, extend bool, now time.Time) (*time.Time, error)
}

// SetCampaigns lets fetches hand out campaign items.
func (s *Service) SetCampaigns(c Campaigns) { s.campaigns = c }

// withItems adds to res, a fetch's outcome, up to n campaign items (uid holds at most
// limit of one campaign).
func (s *Service) withItems(ctx context.Context, uid string, res FetchResult, n, limit int, tk taskd.Take, now time.Time) (FetchResult, error) {
	if s.campaigns == nil || n <= 0 || (res.Task != nil && res.Tasks == nil) {
		return res, nil
	}
	if s.cache.Away() {
		return res, nil // the items live in Redis: they wait for it
	}
	items, next, err := s.campaigns.Take(ctx, uid, n, limit, tk, now)
	if err != nil {
		if len(res.Tasks) > 0 {
			return res, nil // the tasks are handed out; the items wait for the next fetch
		}
		return res, err
	}
	if len(items) == 0 {
		if next != nil && (res.NextDueAt == nil || next.Before(*res.NextDueAt)) {
			res.NextDueAt = next
		}
		return res, nil
	}
	for _, it := range items {
		a := itemAssignment(it)
		if !it.Redo {
			s.cfg.Metrics.Dispatched("campaign")
		}
		res.Tasks = append(res.Tasks, a)
	}
	if res.Task == nil {
		res.Task = res.Tasks[0]
	}
	return res, nil
}

func itemAssignment(it taskd.CampaignItem) *Assignment {
	c := it.Campaign
	due := c.CreatedAt
	if c.StartedAt != nil {
		due = *c.StartedAt
	}
	return &Assignment{
		LogID:          it.Log.String(),
		TaskID:         taskd.CampaignTaskID(c.ID),
		Kind:           "campaign",
		DueAt:          due,
		TemplateID:     c.TemplateID,
		Params:         c.Params,
		Redo:           it.Redo,
		Attempt:        it.Log.Attempt,
		LeaseExpiresAt: new(it.LeaseUntil),
		Checkpoint:     it.Checkpoint,
		CampaignID:     new(c.ID),
		Item:           it.Item,
	}
}

// completeItem completes a campaign item.
func (s *Service) completeItem(ctx context.Context, uid, logID string, result taskd.Result, detail json.RawMessage) error {
	if s.campaigns == nil {
		return taskd.Errorf(taskd.CodeStaleLease, "log_id %s is not your open dispatch", logID)
	}
	if err := s.campaigns.Complete(ctx, uid, logID, result, detail, s.now()); err != nil {
		return err
	}
	s.cfg.Metrics.Completed("campaign", result.String())
	return nil
}
