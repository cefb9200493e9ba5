"""What the warehouse's rows mean: metric maths and statistics, the offload review, the what-if, data quality
and alerting."""
