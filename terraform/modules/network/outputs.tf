output "vpc_id" {
  description = "Id of the VPC."
  value       = aws_vpc.this.id
}

output "public_subnet_ids" {
  description = "Ids of the public subnets, one per availability zone (the load balancer spans them; the nodes run in them)."
  value       = aws_subnet.public[*].id
}

output "private_subnet_ids" {
  description = "Ids of the private subnets (no route out of the VPC), one per availability zone: the database subnet group of region-node's PostgreSQL option."
  value       = aws_subnet.private[*].id
}
