# The two commands a newcomer needs: `make run` and `make test`.
GO ?= go

.PHONY: run test console-e2e bench lint

run: ## run the server on MySQL and Redis on localhost, schema applied at start
	DISPATCH_ADMIN_TOKEN=$${DISPATCH_ADMIN_TOKEN:-dev-admin-token} \
	DISPATCH_ENROLL_SECRET=$${DISPATCH_ENROLL_SECRET:-dev-enroll-secret} \
	$(GO) run ./cmd/dispatchd

# The packages whose tests run a second time on a local Redis Cluster (six
# redis-server processes, started and stopped by rediscluster).
CLUSTER_PKGS = ./queue ./dispatch ./admin ./clientkey ./internal/app ./loadtest ./cmd/dispatchd

test: console-e2e ## the whole suite, race detector on, against the real MySQL and Redis, then again on a Redis Cluster where Redis matters
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) run ./internal/testenv/rediscluster -- $(GO) test -race -count=1 -timeout 20m $(CLUSTER_PKGS)

# The console's browser tests drive Debian's chromium with playwright-core (pinned in
# internal/console/e2e/package-lock.json).
console-e2e:
	npm ci --prefix internal/console/e2e --no-audit --no-fund --loglevel=error

bench: ## benchmarks (see README: Performance)
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...

.PHONY: up down

up: ## the full stack (MySQL 8, Redis 7, Kafka, Elasticsearch, Kibana, dispatchd, logsink); see docker-compose.yml
	docker compose up -d --build

down: ## stop the stack; the data volumes stay (docker compose down -v removes them)
	docker compose down
