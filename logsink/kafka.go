package logsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// parseCompression maps a setting to a kafka-go codec; "" and "none" mean none.
func parseCompression(name string) (kafka.Compression, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, fmt.Errorf("unknown compression %q (none, gzip, snappy, lz4, zstd)", name)
}

// kafkaLoggers adapts kafka-go's printf loggers to slog, both at debug level: kafka-go
// logs every retried attempt of every partition, and what finally fails is logged by
// the relay and the sink, once.
func kafkaLoggers(log *slog.Logger) (info, errs kafka.Logger) {
	f := kafka.LoggerFunc(func(msg string, args ...any) {
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug(fmt.Sprintf(msg, args...), "source", "kafka-go")
		}
	})
	return f, f
}

// ensureTopics creates the topics if they do not exist. Existing topics are left as
// they are: partitions and replication are an operator's decision once a topic exists.
func ensureTopics(ctx context.Context, brokers []string, partitions, replication int, topics ...string) error {
	conn, err := (&kafka.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return fmt.Errorf("kafka dial %s: %w", brokers[0], err)
	}
	defer conn.Close()
	// Topic creation must go to the controller.
	ctrl, err := conn.Controller()
	if err != nil {
		return fmt.Errorf("kafka controller: %w", err)
	}
	cc, err := (&kafka.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp",
		net.JoinHostPort(ctrl.Host, strconv.Itoa(ctrl.Port)))
	if err != nil {
		return fmt.Errorf("kafka controller dial: %w", err)
	}
	defer cc.Close()
	if dl, ok := ctx.Deadline(); ok {
		cc.SetDeadline(dl)
	}
	cfgs := make([]kafka.TopicConfig, len(topics))
	for i, t := range topics {
		cfgs[i] = kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: replication}
	}
	if err := cc.CreateTopics(cfgs...); err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		return fmt.Errorf("create topics %v: %w", topics, err)
	}
	return nil
}

// backoff grows exponentially from min to max, with jitter so that many waiters do not
// retry in step.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return jitter(b.cur)
}

func (b *backoff) reset() { b.cur = 0 }

// retryDelay is the attempt-th (1-based) delay of an exponential backoff.
func retryDelay(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	return jitter(min(d, hi))
}

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d or until ctx is done, reporting whether the full time passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
