"""Node assembly: configuration, the controller listener, the roles a node runs, and the
local development cluster."""
