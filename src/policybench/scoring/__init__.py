"""Scoring rollouts from their recordings (`policybench score`): a page on the pages' server
where a person gives each rollout a verdict."""
