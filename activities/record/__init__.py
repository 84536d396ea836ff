"""What an activity leaves on record besides its result (floor 1 of activities/): checkpoint
writes carried by calls and the mirror activity, secrets redacted before anything is persisted,
and the activities' trace spans."""
