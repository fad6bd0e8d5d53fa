package logsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
)

// Lag is how far the consumer group is behind, as the broker sees it.
type Lag struct {
	// Events is, summed over every partition of the topic (read by this sink or not,
	// read yet or not), the high watermark minus the group's committed offset (or the
	// log start offset where the group has committed none).
	Events int64
	// OldestAge is the age of the oldest event not yet indexed: of the messages at the
	// partitions' committed offsets, the oldest by its Kafka timestamp. 0 without lag.
	OldestAge time.Duration
	// At is when this was measured; zero before the first measurement.
	At time.Time
}

// lagProbe measures Lag from the broker: partitions from the topic's metadata,
// watermarks from ListOffsets, the group's offsets from OffsetFetch, and the time of
// the message at each lagging partition's committed offset by fetching it (once per
// offset: a partition that has not moved is not fetched again).
type lagProbe struct {
	client       *kafka.Client
	topic, group string
	stamps       map[int]stamp // partition -> time of the message at its committed offset
}

type stamp struct {
	offset int64
	at     time.Time
}

func newLagProbe(brokers []string, topic, group string) *lagProbe {
	return &lagProbe{
		client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second,
			Transport: &kafka.Transport{DialTimeout: 10 * time.Second}},
		topic: topic, group: group,
		stamps: map[int]stamp{},
	}
}

func (p *lagProbe) close() {
	if t, ok := p.client.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
}

// measure asks the broker; now stamps the answer.
func (p *lagProbe) measure(ctx context.Context, now time.Time) (Lag, error) {
	md, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{p.topic}})
	if err != nil {
		return Lag{}, fmt.Errorf("topic metadata: %w", err)
	}
	var ids []int
	for _, t := range md.Topics {
		if t.Name != p.topic {
			continue
		}
		if t.Error != nil {
			return Lag{}, fmt.Errorf("topic %s: %w", p.topic, t.Error)
		}
		for _, part := range t.Partitions {
			ids = append(ids, part.ID)
		}
	}
	if len(ids) == 0 {
		return Lag{}, fmt.Errorf("topic %s has no partitions", p.topic)
	}
	first, err := p.offsets(ctx, ids, kafka.FirstOffset)
	if err != nil {
		return Lag{}, err
	}
	last, err := p.offsets(ctx, ids, kafka.LastOffset)
	if err != nil {
		return Lag{}, err
	}
	committed, err := p.committed(ctx, ids)
	if err != nil {
		return Lag{}, err
	}

	lag := Lag{At: now}
	for _, id := range ids {
		from, ok := committed[id]
		if !ok || from < first[id] { // none committed, or retention deleted it: the reader starts at the first
			from = first[id]
		}
		n := max(last[id]-from, 0)
		lag.Events += n
		if n == 0 {
			delete(p.stamps, id)
			continue
		}
		at, err := p.timeAt(ctx, id, from)
		if err != nil {
			return Lag{}, err
		}
		if !at.IsZero() {
			lag.OldestAge = max(lag.OldestAge, now.Sub(at))
		}
	}
	return lag, nil
}

// committed returns the group's committed offset of each partition that has one. A
// group that does not exist yet (some brokers say so, others answer -1) has none.
func (p *lagProbe) committed(ctx context.Context, ids []int) (map[int]int64, error) {
	of, err := p.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: p.group, Topics: map[string][]int{p.topic: ids}})
	if err == nil {
		err = of.Error
	}
	out := map[int]int64{}
	if errors.Is(err, kafka.GroupIdNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("group %s offsets: %w", p.group, err)
	}
	for _, o := range of.Topics[p.topic] {
		switch {
		case errors.Is(o.Error, kafka.GroupIdNotFound):
		case o.Error != nil:
			return nil, fmt.Errorf("group %s offset of partition %d: %w", p.group, o.Partition, o.Error)
		case o.CommittedOffset >= 0:
			out[o.Partition] = o.CommittedOffset
		}
	}
	return out, nil
}

// offsets returns the first or last (high watermark) offset of each partition.
func (p *lagProbe) offsets(ctx context.Context, ids []int, which int64) (map[int]int64, error) {
	reqs := make([]kafka.OffsetRequest, len(ids))
	for i, id := range ids {
		reqs[i] = kafka.OffsetRequest{Partition: id, Timestamp: which}
	}
	res, err := p.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{p.topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := make(map[int]int64, len(ids))
	for _, po := range res.Topics[p.topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("offsets of partition %d: %w", po.Partition, po.Error)
		}
		if which == kafka.FirstOffset {
			out[po.Partition] = po.FirstOffset
		} else {
			out[po.Partition] = po.LastOffset
		}
	}
	for _, id := range ids {
		if _, ok := out[id]; !ok {
			return nil, fmt.Errorf("no offsets for partition %d", id)
		}
	}
	return out, nil
}

// timeAt returns the timestamp of the message at offset (or the first one after it,
// past a gap), zero if the broker returned none.
func (p *lagProbe) timeAt(ctx context.Context, partition int, offset int64) (time.Time, error) {
	if s, ok := p.stamps[partition]; ok && s.offset == offset {
		return s.at, nil
	}
	res, err := p.client.Fetch(ctx, &kafka.FetchRequest{Topic: p.topic, Partition: partition, Offset: offset,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("fetch partition %d at %d: %w", partition, offset, err)
	}
	if res.Records == nil {
		return time.Time{}, nil
	}
	for {
		rec, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return time.Time{}, nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("read partition %d at %d: %w", partition, offset, err)
		}
		if rec.Offset >= offset {
			p.stamps[partition] = stamp{offset, rec.Time}
			return rec.Time, nil
		}
	}
}
