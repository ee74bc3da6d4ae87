-- Services (issue 24): a service's terms and restarts (core::service::Service) as JSON; NULL for other kinds.
ALTER TABLE workloads ADD COLUMN service TEXT;
